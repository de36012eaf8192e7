// The screenshots of docs/dashboard.md, taken again: against the herald at HERALD_URL (through
// .ci/with-server, which also gives the test nameserver and the server's data directory), it signs
// up, creates a project, fills it with example data through the API (a verified domain, contacts
// with custom data, topics, templates, segments, a workflow and its executions, a sent and a draft
// campaign with opens and clicks, events, suppressions, a second member), then saves a 1,280 x 800
// PNG of each area of the dashboard into docs/dashboard/ (and one at 390 px). Not part of CI:
//   cd web && npm ci && npm run build && cd ..
//   HERALD_ACCOUNTS__DASHBOARD_DIR=$PWD/web/dist .ci/with-server "" -- node web/e2e/screenshots.mjs
// SHOTS_DIR writes them elsewhere; CHROMIUM names another browser than /usr/bin/chromium.
import { mkdir, readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startDns } from "./dns.mjs";
import { caller, check, decoded, mailedLink } from "./lib.mjs";

const base = process.env.HERALD_URL;
check(base, "HERALD_URL is not set; run through .ci/with-server");
check(process.env.HERALD_TEST_DNS, "HERALD_TEST_DNS is not set; run through .ci/with-server");
const out = process.env.SHOTS_DIR ?? fileURLToPath(new URL("../../docs/dashboard/", import.meta.url));
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const owner = { email: "maya@northwind.example.com", password: "a long enough password" };
const domain = "northwind.example.com";

// Twenty contacts: name, plan, country, city, visits, locale, time zone.
const people = [
  ["Ada", "Lovelace", "pro", "GB", "London", 14, "en-GB", "Europe/London"],
  ["Marie", "Dubois", "pro", "FR", "Lyon", 9, "fr-FR", "Europe/Paris"],
  ["Jonas", "Berg", "free", "NO", "Bergen", 2, "nb-NO", "Europe/Oslo"],
  ["Lucía", "Fernández", "team", "ES", "Valencia", 21, "es-ES", "Europe/Madrid"],
  ["Kenji", "Watanabe", "pro", "JP", "Osaka", 6, "ja-JP", "Asia/Tokyo"],
  ["Amara", "Okafor", "free", "NG", "Lagos", 1, "en-NG", "Africa/Lagos"],
  ["Théo", "Martin", "pro", "FR", "Paris", 3, "fr-FR", "Europe/Paris"],
  ["Priya", "Raman", "team", "IN", "Chennai", 17, "en-IN", "Asia/Kolkata"],
  ["Lena", "Schmidt", "free", "DE", "Hamburg", 4, "de-DE", "Europe/Berlin"],
  ["Carlos", "Souza", "pro", "BR", "Recife", 12, "pt-BR", "America/Recife"],
  ["Grace", "Hopper", "team", "US", "Arlington", 30, "en-US", "America/New_York"],
  ["Noah", "Taylor", "free", "CA", "Halifax", 0, "en-CA", "America/Halifax"],
  ["Sofia", "Rossi", "pro", "IT", "Bologna", 11, "it-IT", "Europe/Rome"],
  ["Camille", "Laurent", "free", "FR", "Nantes", 15, "fr-FR", "Europe/Paris"],
  ["Olu", "Adeyemi", "pro", "GB", "Leeds", 8, "en-GB", "Europe/London"],
  ["Mei", "Chen", "team", "SG", "Singapore", 5, "en-SG", "Asia/Singapore"],
  ["Erik", "Lund", "pro", "SE", "Malmö", 19, "sv-SE", "Europe/Stockholm"],
  ["Hana", "Novak", "free", "CZ", "Brno", 7, "cs-CZ", "Europe/Prague"],
  ["Liam", "Murphy", "pro", "IE", "Cork", 2, "en-IE", "Europe/Dublin"],
  ["Zoe", "Walker", "free", "AU", "Hobart", 13, "en-AU", "Australia/Hobart"],
].map(([firstName, lastName, plan, country, city, visits, locale, timezone], i) => ({
  email: `${firstName.normalize("NFD").replace(/[^A-Za-z]/g, "").toLowerCase()}.${lastName
    .normalize("NFD")
    .replace(/[^A-Za-z]/g, "")
    .toLowerCase()}@${["example.com", "example.org", "example.net"][i % 3]}`,
  subscribed: i !== 11 && i !== 17,
  data: { firstName, lastName, plan, country, city, visits, locale, timezone },
}));
const ada = people[0].email;

const errors = [];
const sizes = [];

/** Waits until the page shows no "Loading…" and nothing busy, its fonts are in, then a moment
 * for drawings (charts, the canvas) to end their animation; the focus is taken off. */
async function settle(page, extra = 300) {
  await page.waitForLoadState("networkidle", { timeout: 5000 }).catch(() => {});
  for (let waited = 0; ; waited += 100) {
    const busy = await page.evaluate(
      () =>
        /Loading[^\n]*…/.test(document.querySelector("main")?.innerText ?? "") ||
        document.querySelector("[aria-busy=true]") !== null,
    );
    if (!busy) break;
    check(waited < 15_000, `${page.url()} is still loading after 15 s`);
    await sleep(100);
  }
  await page.evaluate(() => document.fonts.ready);
  await page.evaluate(() => document.activeElement instanceof HTMLElement && document.activeElement.blur());
  await page.mouse.move(0, 0);
  await sleep(extra);
}

/** Saves the viewport as `name`.png, scrolled so that `top` (a locator; the page's content below
 * the header by default, `null` for the header too) is near the top. */
async function shot(page, name, { top = page.locator("main"), extra } = {}) {
  if (top) await top.evaluate((e) => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - (e.tagName === "MAIN" ? 0 : 16)));
  else await page.evaluate(() => window.scrollTo(0, 0));
  await settle(page, extra);
  check(errors.length === 0, errors.join("\n"));
  const path = join(out, `${name}.png`);
  await page.screenshot({ path, animations: "disabled", caret: "hide" });
  const { size } = await stat(path);
  sizes.push([`${name}.png`, size]);
  console.log(`  ${name}.png: ${Math.round(size / 1024)} KB`);
}

/** A filter's group of one condition. */
const only = (field, operator, value) => ({ filters: [{ field, operator, value }] });

const nav = (page, name) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true }).click();

/** Publishes the domain's records in the test nameserver and verifies it through the API. */
async function verifiedDomain(call) {
  const dns = await startDns(process.env.HERALD_TEST_DNS);
  const made = await call("POST", "/domains", { domain });
  for (const r of made.records) dns.publish(r.type, r.name, r.value);
  for (let attempt = 0; attempt < 10; attempt++) {
    if ((await call("GET", `/domains/${made.id}/verify`)).status === "verified") return made.id;
    await sleep(1000);
  }
  throw new Error(`${domain} is not verified after publishing its records`);
}

/** Opens and clicks on the campaign's mail as some readers would: the tracking links of the
 * .eml files the outbox transport wrote, fetched like a mail client and a browser would. */
async function readMail(subject, opens, clicks) {
  const outbox = join(process.env.HERALD_SERVER_DATA_DIR, "outbox");
  const mails = [];
  for (const name of (await readdir(outbox)).filter((n) => n.endsWith(".eml"))) {
    const mail = decoded(await readFile(join(outbox, name), "utf8"));
    if (mail.includes(subject)) mails.push(mail);
  }
  check(mails.length > 0, `no mail in the outbox has the subject ${subject}`);
  let opened = 0;
  let clicked = 0;
  for (const mail of mails) {
    const open = mail.match(/\/t\/o\/[A-Za-z0-9_.-]+/)?.[0];
    const click = mail.match(/\/t\/c\/[A-Za-z0-9_.-]+/)?.[0];
    if (open && opened < opens) {
      await fetch(`${base}${open}`).then((r) => r.arrayBuffer());
      opened++;
    }
    if (click && clicked < clicks) {
      await fetch(`${base}${click}`, { redirect: "manual" }).then((r) => r.arrayBuffer());
      clicked++;
    }
  }
  console.log(`  ${mails.length} mails: ${opened} opened, ${clicked} clicked`);
}

async function waitFor(what, test) {
  for (let waited = 0; !(await test()); waited += 250) {
    check(waited < 30_000, `waited 30 s for ${what}`);
    await sleep(250);
  }
}

await mkdir(out, { recursive: true });
const browser = await chromium.launch({ executablePath, headless: true });
try {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 800 },
    deviceScaleFactor: 1,
    locale: "en-US",
    timezoneId: "Europe/London",
    reducedMotion: "reduce",
  });
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));

  // Sign up and create the project in the dashboard.
  console.log("signing up");
  await page.goto(`${base}/app/signup`);
  await page.getByRole("heading", { name: "Create your account" }).waitFor();
  await page.getByLabel("Email").fill(owner.email);
  await page.getByLabel("Password").fill(owner.password);
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "Projects" }).waitFor();
  await page.getByLabel("Project name").fill("Northwind Coffee");
  await page.getByRole("button", { name: "Create project" }).click();
  const created = page.getByRole("status").filter({ hasText: "is ready" });
  await created.waitFor();
  const secret = (await created.textContent()).match(/sk_[A-Za-z0-9_-]+/)?.[0];
  check(secret, "the new project's secret key is not shown");
  const call = caller(base, secret);
  const projectId = await page.evaluate(() => localStorage.getItem("herald.project"));

  // The data a project has after a few weeks.
  console.log("filling the project");
  await verifiedDomain(call);
  const news = await call("POST", "/topics", {
    name: "Product news",
    description: "New coffees and brewing gear, once a month.",
    defaultSubscription: "OPT_IN",
    visibility: "PUBLIC",
  });
  const roast = await call("POST", "/topics", {
    name: "Roaster's notes",
    description: "A weekly letter from the roastery.",
    defaultSubscription: "OPT_OUT",
    visibility: "PUBLIC",
  });
  await call("POST", "/topics", {
    name: "Wholesale offers",
    description: "Prices for cafés and offices.",
    defaultSubscription: "OPT_OUT",
    visibility: "PRIVATE",
  });
  for (const [i, p] of people.entries()) {
    await call("POST", "/contacts", { ...p, topics: [{ id: roast.id, subscribed: i % 4 === 0 }] });
  }
  const welcome = await call("POST", "/templates", {
    name: "Welcome",
    type: "TRANSACTIONAL",
    from: `hello@${domain}`,
    fromName: "Northwind Coffee",
    subject: 'Welcome to Northwind, {{firstName ?? "friend"}}',
    body:
      '<h1>Welcome, {{firstName ?? "friend"}}!</h1>\n<p>Your {{plan}} plan is ready. Your first bag ships this week from our roastery.</p>\n' +
      '<p><a href="https://northwind.example.com/brew-guide">Read the brewing guide</a></p>\n<p>Maya, at Northwind Coffee</p>\n' +
      '<p><small><a href="{{manageUrl}}">Email preferences</a></small></p>',
    variants: {
      fr: {
        subject: "Bienvenue chez Northwind, {{firstName ?? \"ami\"}}",
        body: '<h1>Bienvenue, {{firstName ?? "ami"}} !</h1>\n<p>Votre offre {{plan}} est prête. Votre premier paquet part cette semaine.</p>',
      },
    },
  });
  for (const [name, type, sender, subject, text, topicId] of [
    ["Order shipped", "TRANSACTIONAL", "orders", "Your order is on its way", "your order left the roastery today."],
    ["Monthly coffee news", "MARKETING", "news", "This month at Northwind", "here is what we roast this month.", news.id],
  ]) {
    await call("POST", "/templates", { name, type, from: `${sender}@${domain}`, subject, body: `<p>Hi {{firstName}}, ${text}</p>`, topicId });
  }
  for (const [i, p] of people.entries()) {
    // No event data: /v1/track stores it as the contact's data too.
    await call("POST", "/v1/track", { email: p.email, event: "page_viewed" });
    if (i % 3 !== 2) await call("POST", "/v1/track", { email: p.email, event: "order_placed" });
    if (i % 5 === 0) await call("POST", "/v1/track", { email: p.email, event: "subscription_renewed" });
  }
  await call("POST", "/v1/track", { email: ada, event: "review_written" });
  await call("POST", "/v1/send", {
    to: people.slice(0, 6).map((p) => p.email),
    from: `orders@${domain}`,
    subject: "Your order is on its way",
    body: "<p>Your order left the roastery today.</p>",
  });
  const segment = await call("POST", "/segments", {
    name: "Pro in France, regulars or reviewers",
    description: "Pro customers in France, with more than 10 visits, or who wrote a review.",
    type: "DYNAMIC",
    condition: {
      logic: "AND",
      groups: [
        only("data.plan", "equals", "pro"),
        {
          filters: [],
          conditions: {
            logic: "OR",
            groups: [only("data.country", "equals", "FR"), only("data.visits", "greaterThan", 10), only("event.review_written", "triggered")],
          },
        },
      ],
    },
  });
  const beta = await call("POST", "/segments", { name: "Beta tasters", description: "They try new roasts first.", type: "STATIC" });
  await call("POST", `/segments/${beta.id}/members`, { emails: people.filter((_, i) => i % 3 === 0).map((p) => p.email) });
  await call("POST", "/suppressions", { emails: ["bounced.box@example.com", "old.address@example.org"], reason: "HARD_BOUNCE" });
  await call("POST", "/suppressions", { emails: ["no.more.mail@example.net"], reason: "COMPLAINT" });
  await call("POST", "/suppressions", { emails: ["asked.to.leave@example.com", "press@example.org"] });

  const sender = await page.evaluate(
    ([id, body]) =>
      fetch(`/users/@me/projects/${id}`, { method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) }).then(
        (r) => r.status,
      ),
    [projectId, { defaultFrom: { email: `hello@${domain}`, name: "Northwind Coffee" } }],
  );
  check(sender < 300, `the default sender was refused: ${sender}`);

  // A second member (through the invitation mail) and one invitation pending.
  const invite = (email, role) =>
    page.evaluate(
      ([id, body]) =>
        fetch(`/projects/${id}/members`, {
          method: "POST",
          headers: { "Content-Type": "application/json", "X-Project-Id": id },
          body: JSON.stringify(body),
        }).then((r) => r.status),
      [projectId, { email, role }],
    );
  check((await invite("tom@northwind.example.com", "ADMIN")) < 300, "the invitation was refused");
  const link = await mailedLink("tom@northwind.example.com", /\/signup\?invitation=[A-Za-z0-9_-]+/);
  const joined = await fetch(`${base}/auth/signup`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ email: "tom@northwind.example.com", password: owner.password, invitation: link.split("=")[1] }),
  });
  check(joined.ok, `the invited member's signup: ${joined.status}`);
  check((await invite("sam@northwind.example.com", "MEMBER")) < 300, "the second invitation was refused");

  // Get started: most steps done, a workflow and a campaign still to come.
  console.log("screenshots");
  await page.reload();
  await nav(page, "Get started");
  await page.getByText("5 of 7 steps done.").waitFor();
  await shot(page, "onboarding", { top: null });

  // The welcome workflow: condition, email, update, exit; enabled, then signups run through it.
  const flow = await call("POST", "/workflows", { name: "Welcome new customers", eventName: "signed_up" });
  const step = (type, name, config) => call("POST", `/workflows/${flow.id}/steps`, { type, name, config });
  const paying = await step("CONDITION", "Paying customer?", {
    filter: { logic: "AND", groups: [only("data.plan", "notEquals", "free")] },
  });
  const send = await step("SEND_EMAIL", "Welcome email", { templateId: welcome.id });
  const mark = await step("UPDATE_CONTACT", "Mark as welcomed", { data: { welcomed: true } });
  const exit = await step("EXIT", "Free plan", { reason: "free plan: no welcome email" });
  const join_ = (from, to, branch) => call("POST", `/workflows/${flow.id}/transitions`, { fromStepId: from.id, toStepId: to.id, branch });
  await join_(paying, send, "yes");
  await join_(paying, exit, "no");
  await join_(send, mark);
  await call("PATCH", `/workflows/${flow.id}`, { enabled: true });
  for (const p of people.slice(0, 8)) await call("POST", "/v1/track", { email: p.email, event: "signed_up" });

  // A campaign sent to everyone, read by some; another one drafted to a segment.
  const subject = "December at Northwind: Ethiopia Guji is back";
  const body =
    "<h1>Ethiopia Guji is back</h1>\n<p>Hi {{firstName}}, the washed Guji from last winter returns this week: peach, jasmine, black tea.</p>\n" +
    '<p><a href="https://northwind.example.com/shop/guji">Order a bag</a></p>';
  const { data: sent } = await call("POST", "/campaigns", {
    name: "December news",
    subject,
    body,
    from: `news@${domain}`,
    fromName: "Northwind Coffee",
    audienceType: "ALL",
    topicId: news.id,
  });
  await call("POST", `/campaigns/${sent.id}/send`, {});
  await waitFor("the campaign to be sent", async () => (await call("GET", `/campaigns/${sent.id}`)).status === "SENT");
  await readMail(subject, 11, 5);
  const { data: draft } = await call("POST", "/campaigns", {
    name: "January tasting invitation",
    subject: "{{firstName}}, join our January tasting",
    body: "<p>Hi {{firstName}},</p>\n<p>Three new roasts, one evening at the roastery. Bring a friend.</p>\n" +
      '<p><a href="https://northwind.example.com/tasting">Save your seat</a></p>',
    from: `events@${domain}`,
    fromName: "Northwind Coffee",
    replyTo: `maya@${domain}`,
    audienceType: "SEGMENT",
    segmentId: segment.id,
  });
  await call("POST", "/v1/track", { email: ada, event: "tasting_booked" });
  await call("POST", `/segments/${segment.id}/refresh`);
  await waitFor("the executions to end", async () => {
    const list = await call("GET", `/workflows/${flow.id}/executions`);
    const rows = list.data ?? list;
    check(!rows.some((e) => e.status === "FAILED"), `an execution failed: ${JSON.stringify(rows)}`);
    return rows.length === 8 && rows.every((e) => e.status === "COMPLETED" || e.status === "EXITED");
  });

  // Contacts: the list, a contact, an import.
  await nav(page, "Contacts");
  await page.getByText(/^\d+ contacts\.$/).waitFor();
  await page.getByRole("link", { name: people[19].email }).waitFor();
  await shot(page, "contacts");

  await page.getByRole("link", { name: ada }).click();
  await page.getByRole("heading", { name: ada }).waitFor();
  await page.getByRole("row", { name: /firstName "Ada"/ }).waitFor();
  await page.getByRole("listitem").filter({ hasText: "order_placed" }).first().waitFor();
  await shot(page, "contact");
  // The same page further down: the emails sent to Ada and her workflow executions.
  const emailsHeading = page.getByRole("heading", { name: "Emails", exact: true });
  await page.getByText(/^\d+ emails?, newest first\.$/).waitFor();
  await page.getByText(/^\d+ executions?, newest first\.$/).waitFor();
  await shot(page, "contact-history", { top: emailsHeading });

  await nav(page, "Contacts");
  await page.getByRole("button", { name: "Import from CSV" }).click();
  await page.getByLabel("CSV file", { exact: true }).setInputFiles({
    name: "cafe-sign-ups.csv",
    mimeType: "text/csv",
    buffer: Buffer.from(
      "email,firstName,plan,city\nines.costa@example.com,Inês,free,Porto\nfelix.wagner@example.org,Felix,pro,Vienna\n" +
        "not an address,Bob,free,Leeds\nnora.hansen@example.net,Nora,team,Aarhus\n",
    ),
  });
  await page.getByRole("button", { name: "Import", exact: true }).click();
  await page.getByRole("status").filter({ hasText: /^Finished: / }).waitFor();
  await page.getByRole("table", { name: "Rows that failed" }).waitFor();
  await shot(page, "import");

  // Templates: the editor with its preview for a contact.
  await nav(page, "Templates");
  await page.getByRole("link", { name: "Welcome", exact: true }).click();
  await page.getByRole("heading", { name: "Welcome", level: 1 }).waitFor();
  await page.getByLabel("Preview for (contact's email)").fill(people[1].email);
  await page.getByText(`For ${people[1].email}, the fr version.`).waitFor();
  await page.getByTitle("Email preview").contentFrame().getByText("Bienvenue, Marie !").waitFor();
  await shot(page, "template");

  // Segments: the filter builder with a nested group, the segment's members.
  await page.goto(`${base}/app/segments/${segment.id}/edit`);
  await page.getByRole("group", { name: "Group 1", exact: true }).waitFor();
  await shot(page, "segment-filter", { top: page.getByRole("group", { name: "Conditions" }) });
  await page.goto(`${base}/app/segments/${segment.id}`);
  await page.getByText(/^\d+ members? now; page 1 of 1\.$/).waitFor();
  await shot(page, "segment");

  // Campaigns: the draft's composer and audience, the sent one's results.
  await nav(page, "Campaigns");
  await page.getByRole("row", { name: /December news Sent/ }).waitFor();
  await page.getByRole("link", { name: draft.name }).click();
  await page.getByText(/contacts? will receive it\./).waitFor();
  await shot(page, "campaign-composer");
  await shot(page, "campaign-audience", { top: page.getByRole("group", { name: "Audience" }) });
  await page.getByRole("link", { name: "All campaigns" }).click();
  await page.getByRole("link", { name: "December news" }).click();
  await page.getByText("Status: Sent").waitFor();
  await page.getByRole("row", { name: /^Opened / }).waitFor();
  await page.getByRole("figure").waitFor();
  await shot(page, "campaign-results", { top: page.getByRole("heading", { name: "Results" }), extra: 1500 });
  await nav(page, "Campaigns");
  await page.getByRole("row", { name: /December news Sent/ }).waitFor();
  await shot(page, "campaigns");

  // Workflows: the canvas, the executions, one execution's timeline.
  await nav(page, "Workflows");
  await page.getByRole("link", { name: flow.name }).click();
  await page.getByRole("group", { name: /^Step 4\. Free plan/ }).waitFor();
  await shot(page, "workflow", { top: page.getByRole("heading", { name: "Canvas" }), extra: 800 });
  await page.getByRole("link", { name: "Executions" }).click();
  await page.getByRole("heading", { name: `Executions of ${flow.name}` }).waitFor();
  await page.getByRole("link", { name: /^exe_/ }).first().waitFor();
  await shot(page, "executions");
  // Ada's: she is on the pro plan, so it went the "yes" way.
  const adaId = (await call("GET", `/contacts?search=${encodeURIComponent(ada)}`)).data[0].id;
  const adaRun = (await call("GET", `/workflows/${flow.id}/executions`)).data.find((e) => e.contactId === adaId);
  await page.getByRole("link", { name: adaRun.id, exact: true }).click();
  await page.getByRole("heading", { name: /: Completed$/ }).first().waitFor();
  await shot(page, "execution");

  // Events, the activity feed, analytics.
  await nav(page, "Events");
  await page.getByRole("row", { name: /^order_placed \d+ / }).waitFor();
  await shot(page, "events");
  await page.getByRole("link", { name: "Activity feed" }).click();
  await page.getByRole("row", { name: /Opened|Clicked/ }).first().waitFor();
  await page.getByRole("button", { name: "Pause live updates" }).click();
  await shot(page, "activity");
  await nav(page, "Analytics");
  await page.getByLabel("Period").selectOption({ label: "Last 24 hours" });
  await page.getByRole("figure", { name: /^Emails, last 24 hours/ }).waitFor();
  await shot(page, "analytics", { extra: 1500 });

  // Domains, settings, members, suppressions, topics, billing.
  await nav(page, "Domains");
  await page.getByRole("link", { name: domain }).click();
  await page.getByRole("table", { name: `DNS records of ${domain}` }).getByRole("row").nth(1).waitFor();
  await shot(page, "domain");
  await nav(page, "Settings");
  await page.getByRole("heading", { name: "API keys" }).waitFor();
  await shot(page, "settings");
  await shot(page, "settings-keys", { top: page.getByRole("heading", { name: "API keys" }) });
  await nav(page, "Members");
  await page.getByRole("heading", { name: "Pending invitations" }).waitFor();
  await shot(page, "members");
  await nav(page, "Suppressions");
  await page.getByText("5 addresses in all.").waitFor();
  await shot(page, "suppressions");
  await nav(page, "Topics");
  await page.getByRole("heading", { name: "Wholesale offers" }).waitFor();
  await shot(page, "topics");
  await nav(page, "Billing");
  await page.getByText(/^Emails queued: \d+/).first().waitFor();
  await shot(page, "billing");

  // On a phone.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${base}/app/contacts/${adaId}`);
  await page.getByRole("heading", { name: ada }).waitFor();
  await shot(page, "contact-phone");
  await context.close();
} finally {
  await browser.close();
}
const big = sizes.filter(([, size]) => size > 200 * 1024);
check(big.length === 0, `over 200 KB: ${big.map(([n, s]) => `${n} (${Math.round(s / 1024)} KB)`).join(", ")}`);
console.log(`${sizes.length} screenshots in ${out}`);
