// Templates: create one, write its body in the code editor with variable completion, see it
// rendered by the server for a contact, add a French version and see it for a contact in
// fr-CA, a syntax error shown on its field, save, test send, duplicate and delete; an email's
// inline styles kept in the preview.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function templates({ page, run, call }) {
  // Its own contacts: other areas change the first session's.
  const ada = `tpl-ada-${run}@example.com`;
  const marie = `marie-${run}@example.com`;
  await call("POST", "/contacts", { email: ada, data: { plan: "pro" } });
  await call("POST", "/contacts", { email: marie, data: { firstName: "Marie", locale: "fr-CA" } });

  await page.getByRole("link", { name: "Templates" }).click();
  await page.getByRole("heading", { name: "Templates" }).waitFor();
  // Other areas may have made templates before this one.
  const count = page.getByText(/^\d+ templates?\.$/);
  await count.waitFor();
  const before = Number((await count.textContent()).match(/\d+/)[0]);
  const templates = (n) => `${before + n} ${before + n === 1 ? "template" : "templates"}.`;
  await accessible(page, "templates (none)");

  await page.getByRole("button", { name: "New template" }).click();
  await page.getByLabel("Template name").fill(`Greeting ${run}`);
  await page.getByLabel("Subject").fill('Hi {{firstName ?? "there"}}');
  await page.getByRole("button", { name: "Create template" }).click();
  await page.getByRole("heading", { name: `Greeting ${run}` }).waitFor();
  const id = page.url().split("/").pop();
  check(id.startsWith("tpl_"), `not on a template's page: ${page.url()}`);

  // The body, typed into CodeMirror; `{{fir` offers the contact field firstName.
  const body = page.getByRole("textbox", { name: "Body" });
  await body.click();
  await page.keyboard.press("ControlOrMeta+a");
  await page.keyboard.type("Dear {{fir");
  await page.getByRole("option", { name: /firstName/ }).waitFor();
  // CodeMirror ignores keys for its first 75 ms on a new completion list (interactionDelay).
  await page.waitForTimeout(150);
  await page.keyboard.press("Enter");
  // The completion is applied before typing on (a busy machine may take a moment).
  await page.waitForFunction(
    (el) => el.textContent === "Dear {{firstName}}",
    await body.elementHandle(),
  );
  await page.keyboard.type(", your plan is {{plan}}.");
  check((await body.textContent()) === "Dear {{firstName}}, your plan is {{plan}}.", `body is ${await body.textContent()}`);

  // Rendered by the server for Ada (plan pro, no first name), in a sandboxed frame.
  const frame = page.getByTitle("Email preview").contentFrame();
  await page.getByLabel("Preview for (contact's email)").fill(ada);
  await frame.getByText("Dear , your plan is pro.").waitFor();
  await page.getByText(`For ${ada}, the default version.`).waitFor();
  await page.getByText("Subject: Hi there").waitFor();
  await accessible(page, "template editor");

  // A French version, seen by Marie, whose data.locale is fr-CA.
  await page.getByLabel("New language tag").fill("fr");
  await page.getByRole("button", { name: "Add language" }).click();
  await page.getByRole("button", { name: "Edit fr", pressed: true }).waitFor();
  await page.getByLabel("Subject (fr)").fill("Bonjour {{firstName}}");
  await page.getByRole("textbox", { name: "Body (fr)" }).click();
  await page.keyboard.press("ControlOrMeta+a");
  await page.keyboard.type("Votre offre : {{plan ?? aucune}}.");
  await page.getByLabel("Preview for (contact's email)").fill(marie);
  await page.getByText(`For ${marie}, the fr version.`).waitFor();
  await page.getByText("Subject: Bonjour Marie").waitFor();
  await frame.getByText("Votre offre : aucune.").waitFor();

  // A syntax error is shown on its field, then fixed.
  await page.getByLabel("Subject (fr)").fill("Bonjour {{#if vip}}");
  await page.getByText(/line 1, column \d+/).first().waitFor();
  check(
    (await page.getByLabel("Subject (fr)").getAttribute("aria-invalid")) === "true",
    "the broken subject is not marked invalid",
  );
  await page.getByLabel("Subject (fr)").fill("Bonjour {{firstName}}");
  await page.getByText(`For ${marie}, the fr version.`).waitFor();
  check((await page.getByLabel("Subject (fr)").getAttribute("aria-invalid")) === "false", "the fixed subject is still marked invalid");
  await accessible(page, "template editor (fr)");

  await page.getByRole("button", { name: "Save template" }).click();
  await page.getByText("Saved.", { exact: true }).waitFor();
  const saved = await call("GET", `/templates/${id}`);
  check(saved.body === "Dear {{firstName}}, your plan is {{plan}}.", `saved body: ${saved.body}`);
  check(saved.variants.fr?.subject === "Bonjour {{firstName}}", `saved variants: ${JSON.stringify(saved.variants)}`);
  await page.getByText("No campaign or workflow sends this template.").waitFor();

  // A test send goes through /v1/send: this project has no sender yet, which it says.
  await page.getByLabel("Send the saved template to").fill(ada);
  await page.getByRole("button", { name: "Send test" }).click();
  await page.getByRole("alert").filter({ hasText: "from" }).waitFor();

  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "template editor");
  await page.getByRole("link", { name: "Back to templates" }).click();
  await page.getByText(templates(1)).waitFor();
  await fitsWidth(page, "templates");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.getByRole("row", { name: new RegExp(`Greeting ${run} Transactional default, fr`) }).waitFor();
  await accessible(page, "templates");

  // Duplicate, then delete the copy.
  await page.getByRole("button", { name: `Duplicate Greeting ${run}`, exact: true }).click();
  await page.getByRole("heading", { name: `Greeting ${run} (copy)` }).waitFor();
  await page.getByRole("link", { name: "Back to templates" }).click();
  await page.getByText(templates(2)).waitFor();
  await page.getByRole("button", { name: `Delete Greeting ${run} (copy)` }).click();
  await page.getByRole("alertdialog").waitFor();
  await accessible(page, "templates (deleting)");
  await page.getByRole("button", { name: "Yes, delete it" }).click();
  await page.getByText(`“Greeting ${run} (copy)” was deleted.`).waitFor();
  await page.getByText(templates(1)).waitFor();

  // The preview shows an email as a mail client would, with its inline styles.
  const styled = await call("POST", "/templates", {
    name: `Styled ${run}`,
    type: "TRANSACTIONAL",
    subject: "Styled",
    body: '<p style="color: rgb(200, 0, 0)">In red</p>',
  });
  await page.goto(`${page.url().replace(/\/$/, "")}/${styled.id}`);
  await page.getByRole("heading", { name: `Styled ${run}` }).waitFor();
  await page.getByLabel("Preview for (contact's email)").fill(ada);
  const red = page.getByTitle("Email preview").contentFrame().getByText("In red");
  await red.waitFor();
  const color = await red.evaluate((e) => getComputedStyle(e).color);
  check(color === "rgb(200, 0, 0)", `the preview lost the email's inline style: ${color}`);
  await call("DELETE", `/templates/${styled.id}`);
}
