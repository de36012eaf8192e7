// Members and invitations, end to end: a person with an account (address not confirmed) is
// invited, reads the mail (the default `outbox` transport's .eml files in the server's data
// directory) and accepts through the link's page in their own browser; a person without an
// account signs up through their invitation link; a role is changed and a member removed. Also
// the login page's sign-in provider buttons.
import { accessible, check, fitsWidth, gone, mailedLink } from "../lib.mjs";

/** A fresh browser of another person, failing the test on page errors and CSP violations. */
async function stranger(t) {
  const context = await t.page.context().browser().newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => t.errors.push(`page error (second browser): ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy/i.test(m.text())) t.errors.push(`CSP (second browser): ${m.text()}`);
  });
  return { context, page };
}

async function signUp(page, email) {
  await page.getByRole("textbox", { name: "Email" }).fill(email);
  await page.getByLabel("Password").fill("a long enough password");
  await page.getByRole("button", { name: "Create account" }).click();
}

export default async function members(t) {
  const { page, base, run } = t;
  const owner = await page.evaluate(() => fetch("/users/@me").then((r) => r.json()));
  const projectName = await page.getByRole("combobox", { name: "Current project" }).evaluate((s) => s.selectedOptions[0]?.textContent);
  const hire = `hire-${run}@example.com`;
  const newcomer = `newcomer-${run}@example.com`;

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Members" }).click();
  await page.getByRole("heading", { name: "Members", exact: true }).waitFor();
  await page.getByRole("row", { name: `${owner.email} (you) Owner` }).waitFor();
  await accessible(page, "members");

  // The login page: no provider is configured here, so no provider button; one configured
  // (the answer of /auth/oauth-config stood in for) shows its button.
  const hb = await stranger(t);
  const config = await fetch(`${base}/auth/oauth-config`).then((r) => r.json());
  check(config.providers.length === 0, `providers configured: ${JSON.stringify(config)}`);
  await hb.page.goto(`${base}/app/login`);
  await hb.page.getByRole("heading", { name: "Log in" }).waitFor();
  await hb.page.getByRole("link", { name: "Create an account" }).waitFor();
  check((await hb.page.getByRole("link", { name: /^Continue with/ }).count()) === 0, "a provider button without a provider");
  await hb.page.route("**/auth/oauth-config", (route) =>
    route.fulfill({ json: { providers: [{ id: "github", name: "GitHub", url: "/auth/oauth/github" }] } }),
  );
  await hb.page.reload();
  const button = hb.page.getByRole("link", { name: "Continue with GitHub" });
  await button.waitFor();
  check((await button.getAttribute("href")) === "/auth/oauth/github", `the button leads to ${await button.getAttribute("href")}`);
  await accessible(hb.page, "log in (with a provider)");
  await hb.page.unroute("**/auth/oauth-config");

  // The hire has an account (its address not confirmed) before being invited.
  await hb.page.getByRole("link", { name: "Create an account" }).click();
  await signUp(hb.page, hire);
  await hb.page.getByRole("heading", { name: "Projects" }).waitFor();

  // Invited as an admin: mailed, listed as pending.
  await page.getByRole("textbox", { name: "Email address" }).fill(hire);
  await page.getByRole("combobox", { name: "Role", exact: true }).selectOption({ label: "Admin" });
  await page.getByRole("button", { name: "Send invitation" }).click();
  await page.getByText(`An invitation was emailed to ${hire}.`).waitFor();
  await page.getByRole("heading", { name: "Pending invitations" }).waitFor();
  await page.getByRole("row", { name: new RegExp(`^${hire} Admin`) }).waitFor();

  // The hire opens the mailed link in their browser and accepts.
  const accept = await mailedLink(hire, /\/invitations\/accept\?token=[A-Za-z0-9_-]+/);
  await hb.page.goto(`${base}/app${accept}`);
  await hb.page.getByRole("heading", { name: "Join a project" }).waitFor();
  await accessible(hb.page, "accept an invitation");
  await hb.page.getByRole("button", { name: "Accept the invitation" }).click();
  await hb.page.getByRole("heading", { name: `Get started with ${projectName}` }).waitFor();
  await hb.page.getByRole("link", { name: "Members" }).click();
  await hb.page.getByRole("row", { name: `${hire} (you) Admin` }).waitFor();
  await hb.context.close();

  // The owner sees the hire as an admin, no longer pending, and makes them a member.
  await page.reload();
  const hireRow = page.getByRole("row", { name: new RegExp(`^${hire}`) });
  await hireRow.waitFor();
  await gone(page.getByRole("heading", { name: "Pending invitations" }), "the accepted invitation is still pending");
  const role = page.getByRole("combobox", { name: `Role of ${hire}` });
  check((await role.inputValue()) === "ADMIN", `the hire's role is ${await role.inputValue()}`);
  await role.selectOption({ label: "Member" });
  await page.getByText(`${hire} is now member.`).waitFor();
  const team = await page.evaluate(
    (id) => fetch(`/projects/${id}/members`, { headers: { "X-Project-Id": id } }).then((r) => r.json()),
    await page.evaluate(() => localStorage.getItem("herald.project")),
  );
  check(team.members?.find((m) => m.email === hire)?.role === "MEMBER", `the role was not changed: ${JSON.stringify(team)}`);

  // Someone without an account signs up through their invitation link and is in the project.
  await page.getByRole("textbox", { name: "Email address" }).fill(newcomer);
  await page.getByRole("button", { name: "Send invitation" }).click();
  await page.getByText(`An invitation was emailed to ${newcomer}.`).waitFor();
  const signup = await mailedLink(newcomer, /\/signup\?invitation=[A-Za-z0-9_-]+/);
  const nb = await stranger(t);
  await nb.page.goto(`${base}/app${signup}`);
  await nb.page.getByRole("heading", { name: "Create your account" }).waitFor();
  await signUp(nb.page, newcomer);
  await nb.page.getByRole("heading", { name: `Get started with ${projectName}` }).waitFor();
  await nb.context.close();

  // Removed through the dialog.
  await page.reload();
  await page.getByRole("button", { name: `Remove ${newcomer}` }).click();
  const dialog = page.getByRole("dialog", { name: `Remove ${newcomer}?` });
  await dialog.waitFor();
  await accessible(page, "remove a member dialog");
  await dialog.getByRole("button", { name: "Remove from the project" }).click();
  await page.getByText(`${newcomer} was removed from the project.`).waitFor();
  await gone(page.getByRole("row", { name: new RegExp(`^${newcomer}`) }), "the removed member is still listed");

  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "members");
  await page.setViewportSize({ width: 1280, height: 900 });
}
