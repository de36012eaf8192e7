// A new user's first session through the dashboard alone, in headless Chromium (Debian's
// /usr/bin/chromium, or CHROMIUM), against the herald at HERALD_URL (.ci/browser-tests starts
// one on SQLite, then on PostgreSQL). Elements are found by role and accessible name only.
// Every page visited is checked with axe-core: no serious or critical violation. Any Content
// Security Policy violation or page error fails the run.
import { chromium } from "playwright-core";
import { accessible, caller, check, fitsWidth, problems } from "./lib.mjs";
import { areas } from "./areas/index.mjs";

const base = process.env.HERALD_URL;
if (!base) throw new Error("HERALD_URL is not set; run through .ci/browser-tests");
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const run = Date.now().toString(36);
const user = { email: `owner-${run}@example.com`, password: "a long enough password" };
const contact = `ada-${run}@example.com`;

/** On a phone the main navigation folds under "Menu": open it with the keyboard, check it says
 * so, and that Escape closes it and gives the focus back, then open it again. */
async function openMenu(page, width) {
  if (width > 700) return;
  const menu = page.getByRole("button", { name: "Menu" });
  const nav = page.getByRole("navigation", { name: "Main" });
  check((await menu.getAttribute("aria-expanded")) === "false", "the menu is open before it is asked for");
  await menu.focus();
  await page.keyboard.press("Enter");
  await nav.getByRole("link", { name: "Contacts" }).waitFor();
  check((await menu.getAttribute("aria-expanded")) === "true", "the open menu does not say so");
  await fitsWidth(page, "the open menu");
  await page.keyboard.press("Tab");
  await page.keyboard.press("Escape");
  await nav.waitFor({ state: "hidden" });
  check(await menu.evaluate((b) => b === document.activeElement), "Escape did not give the focus back to the menu button");
  await menu.click();
  await nav.waitFor();
}

async function firstSession(browser, width) {
  const context = await browser.newContext({ viewport: { width, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy/i.test(m.text())) errors.push(`CSP: ${m.text()}`);
  });
  const email = width === 390 ? user.email.replace("owner", "phone") : user.email;

  // A browser at / is sent to the dashboard, which sends a stranger to the login page.
  const first = await page.goto(`${base}/`);
  check(first.headers()["content-security-policy"]?.includes("script-src 'self'"), "no strict CSP on the app");
  await page.getByRole("heading", { name: "Log in" }).waitFor();
  check(page.url() === `${base}/app/login`, `expected /app/login, at ${page.url()}`);
  await accessible(page, "log in");

  await page.getByRole("link", { name: "Create an account" }).click();
  await page.getByRole("heading", { name: "Create your account" }).waitFor();
  await accessible(page, "sign up");
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(user.password);
  await page.getByRole("button", { name: "Create account" }).click();

  // Without a project, the first page is the projects page.
  await page.getByRole("heading", { name: "Projects" }).waitFor();
  await accessible(page, "projects (none yet)");
  await page.getByLabel("Project name").fill("Newsletter");
  await page.getByRole("button", { name: "Create project" }).click();
  const created = page.getByRole("status").filter({ hasText: "is ready" });
  await created.waitFor();
  const secret = (await created.textContent()).match(/sk_[A-Za-z0-9_-]+/)?.[0];
  check(secret, "the new project's secret key is not shown");
  await page.getByRole("combobox", { name: "Current project" }).waitFor();
  await accessible(page, "projects (created)");

  await openMenu(page, width);
  await page.getByRole("link", { name: "Get started" }).click();
  await page.getByRole("heading", { name: "Get started with Newsletter" }).waitFor();
  await page.getByText("0 of 7 steps done.").waitFor();
  await page.getByText("Add a contact (to do)").waitFor();
  await accessible(page, "onboarding");

  // A contact created with the API key, with an event, found in the list by search.
  const call = (path, body) =>
    fetch(`${base}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${secret}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }).then((r) => check(r.ok, `POST ${path}: ${r.status}`));
  await call("/contacts", { email: contact, data: { plan: "pro" } });
  await call("/contacts", { email: `grace-${run}@example.com` });
  await call("/v1/track", { email: contact, event: "signed_up" });

  await openMenu(page, width);
  await page.getByRole("link", { name: "Contacts" }).click();
  await page.getByRole("heading", { name: "Contacts" }).waitFor();
  await page.getByText("2 contacts.").waitFor();
  await accessible(page, "contacts");
  await page.getByLabel("Search contacts by email").fill("ada-");
  await page.getByLabel("Search contacts by email").press("Enter");
  await page.getByText("1 contact matching “ada-”.").waitFor();
  await fitsWidth(page, "contacts");
  await page.getByRole("link", { name: contact }).click();
  await page.getByRole("heading", { name: contact }).waitFor();
  await page.getByRole("row", { name: /plan "pro"/ }).waitFor();
  await page.getByText("signed_up").waitFor();
  await accessible(page, "contact");
  await fitsWidth(page, "contact");

  // The step is checked off.
  await openMenu(page, width);
  await page.getByRole("link", { name: "Get started" }).click();
  await page.getByText("Add a contact (done)").waitFor();
  await page.getByText("1 of 7 steps done.").waitFor();

  // Log out and in again with the keyboard alone.
  await page.getByRole("button", { name: "Log out" }).focus();
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Log in" }).waitFor();
  await page.getByLabel("Email").focus();
  await page.keyboard.type(email);
  await page.keyboard.press("Tab");
  await page.keyboard.type(user.password);
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Get started with Newsletter" }).waitFor();

  // Nothing secret in the browser's storage: the session cookie is HttpOnly.
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + document.cookie);
  check(!/sk_|herald_token/.test(stored), `secret in storage: ${stored}`);
  const cookie = (await context.cookies()).find((c) => c.name === "herald_token");
  check(cookie?.httpOnly && cookie.sameSite === "Lax", `session cookie not HttpOnly+SameSite: ${JSON.stringify(cookie)}`);

  // A state-changing call with the session cookie from another site is refused.
  const forged = await page.evaluate(async () => {
    const r = await fetch("/users/@me/projects", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: "same origin" }),
    });
    return r.status;
  });
  check(forged === 201, `a same-origin call was refused: ${forged}`);
  const crossSite = await fetch(`${base}/users/@me/projects`, {
    method: "POST",
    headers: {
      Cookie: `herald_token=${cookie.value}`,
      Origin: "https://elsewhere.example",
      "Sec-Fetch-Site": "cross-site",
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ name: "forged" }),
  });
  check(crossSite.status === 403, `a cross-site call with the cookie answered ${crossSite.status}`);

  check(errors.length === 0, errors.join("\n"));
  return { context, page, secret, errors };
}

const started = Date.now();
const browser = await chromium.launch({ executablePath, headless: true });
try {
  for (const width of [1280, 390]) {
    console.log(`first session at ${width} px`);
    const session = await firstSession(browser, width);
    if (width === 1280) {
      // Each area of the dashboard, in the same logged-in page (web/e2e/areas/).
      const t = { ...session, base, run, call: caller(base, session.secret) };
      // E2E_AREAS=templates,contacts runs only those areas (while working on them).
      const only = process.env.E2E_AREAS?.split(",");
      for (const [name, area] of areas.filter(([n]) => !only || only.includes(n))) {
        console.log(`area: ${name}`);
        try {
          await area(t);
        } catch (e) {
          // The page as the failure left it, for whoever reads the log.
          const shot = `${process.env.E2E_FAILURE_DIR ?? "/tmp"}/herald-e2e-${name}.png`;
          await t.page.screenshot({ path: shot, fullPage: true }).catch(() => {});
          console.error(`area ${name} failed; the page is in ${shot}`);
          throw e;
        }
        check(session.errors.length === 0, session.errors.join("\n"));
      }
    }
    await session.context.close();
  }
} finally {
  await browser.close();
}
if (problems.length > 0) {
  console.error(problems.join("\n"));
  throw new Error(`${problems.length} serious or critical accessibility violations`);
}
console.log(`browser tests passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
