// Contacts: add one with data, import a CSV with a bad row (progress to the end, the row error
// listed), unsubscribe two selected contacts in bulk, edit a contact's typed data (a 422 shown
// on its field) and topics, read its emails (one's history) and events, delete a contact; axe
// and 390 px on each page.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function ({ page, run, call }) {
  const started = Date.now();
  const topic = `Contact page news ${run}`;
  await call("POST", "/topics", { name: topic, defaultSubscription: "OPT_OUT" });
  const added = `lin-${run}@example.com`;
  const bulk = [`max.${run}.bulk@example.com`, `zoe.${run}.bulk@example.com`];
  const subject = `Your contact page ${run}`;
  await call("POST", "/v1/send", { to: `ada-${run}@example.com`, from: "news@example.com", subject, body: "<p>Hello</p>" });

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Contacts" }).click();
  await page.getByRole("heading", { name: "Contacts", level: 1 }).waitFor();

  // Add a contact with a custom field.
  await page.getByRole("button", { name: "Add a contact" }).click();
  await page.getByLabel("Email address").fill(added);
  await page.getByRole("button", { name: "Add a field" }).click();
  await page.getByLabel("Field 1 name").fill("city");
  await page.getByLabel("Field 1 value").fill("Oslo");
  await page.getByRole("button", { name: "Add contact" }).click();
  await page.getByRole("status").filter({ hasText: `Added ${added}.` }).waitFor();
  await page.getByRole("button", { name: "Add a contact" }).click(); // closes the form

  // Import a CSV file with one bad row.
  await page.getByRole("button", { name: "Import from CSV" }).click();
  await page.getByLabel("CSV file", { exact: true }).setInputFiles({
    name: "contacts.csv",
    mimeType: "text/csv",
    buffer: Buffer.from(`email,plan,seats\n${bulk[0]},pro,3\nnot-an-address,free,1\n${bulk[1]},team,5\n`),
  });
  await page.getByRole("button", { name: "Import", exact: true }).click();
  await page.getByRole("status").filter({ hasText: "Finished: 2 of 3 done, 2 added, 0 updated, 1 failed." }).waitFor();
  const bar = page.getByRole("progressbar", { name: "Import progress" });
  check((await bar.getAttribute("value")) === "100", "the import's progress bar did not reach 100");
  const failed = page.getByRole("table", { name: "Rows that failed" });
  await failed.getByRole("row", { name: /^3 not-an-address / }).waitFor();

  // Unsubscribe the two imported contacts, selected by their check boxes.
  await page.getByLabel("Search contacts by email").fill(`.${run}.bulk@`);
  await page.getByLabel("Search contacts by email").press("Enter");
  await page.getByText(`2 contacts matching “.${run}.bulk@”.`).waitFor();
  for (const email of bulk) {
    await page.getByRole("row", { name: new RegExp(`${email} Yes`) }).waitFor();
    await page.getByRole("checkbox", { name: `Select ${email}` }).check();
  }
  await page.getByText("2 selected contacts.").waitFor();
  await page.getByRole("button", { name: "Unsubscribe selected" }).click();
  await page.getByRole("status").filter({ hasText: "Finished: 2 of 2 done, 0 failed." }).waitFor();
  for (const email of bulk) await page.getByRole("row", { name: new RegExp(`${email} No`) }).waitFor();
  check(!(await page.getByRole("checkbox", { name: `Select ${bulk[0]}` }).isChecked()), "selection kept after the bulk action");
  // The scan covers the import panel (its progress and failed rows) and the bulk action's.
  await accessible(page, "contacts (added, imported, bulk action)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "contacts (bulk action)");
  await page.setViewportSize({ width: 1280, height: 900 });

  // A contact's data: a key too long is refused (422) on its field; then saved typed.
  const ada = `ada-${run}@example.com`;
  await page.getByLabel("Search contacts by email").fill("ada-");
  await page.getByLabel("Search contacts by email").press("Enter");
  await page.getByRole("link", { name: ada }).click();
  await page.getByRole("heading", { name: ada }).waitFor();
  const id = page.url().split("/").pop();
  await page.getByRole("button", { name: "Edit data" }).click();
  check((await page.getByLabel("Field 1 name").inputValue()) === "plan", "the editor's first field is not plan");
  await page.getByLabel("Field 1 value").fill("team");
  await page.getByRole("button", { name: "Add a field" }).click();
  await page.getByLabel("Field 2 name").fill("seats");
  await page.getByLabel("Field 2 type").selectOption({ label: "Number" });
  await page.getByLabel("Field 2 value").fill("12");
  await page.getByRole("button", { name: "Add a field" }).click();
  await page.getByLabel("Field 3 name").fill("k".repeat(300));
  await page.getByLabel("Field 3 value").fill("too long a name");
  await page.getByRole("button", { name: "Save data" }).click();
  await page.getByRole("alert").waitFor();
  const long = page.getByLabel("Field 3 name");
  check((await long.getAttribute("aria-invalid")) === "true", "the 422 is not shown on the field");
  const why = await page.locator(`#${(await long.getAttribute("aria-describedby")).replace(/:/g, "\\:")}`).textContent();
  check(why.length > 0, "the field's error has no text");
  await accessible(page, "contact (data editor with an error)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "contact (data editor)");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.getByRole("button", { name: /^Remove field 3/ }).click();
  await page.getByRole("button", { name: "Save data" }).click();
  await page.getByRole("status").filter({ hasText: "Data saved." }).waitFor();
  await page.getByRole("row", { name: /plan "team"/ }).waitFor();
  await page.getByRole("row", { name: /seats 12 Number/ }).waitFor();
  const saved = await call("GET", `/contacts/${id}`);
  check(saved.data.plan === "team" && saved.data.seats === 12, `data not saved typed: ${JSON.stringify(saved.data)}`);

  // Its topics.
  const box = page.getByRole("checkbox", { name: topic });
  check(!(await box.isChecked()), "an opt-out topic is checked");
  await box.check();
  await page.getByRole("button", { name: "Save topics" }).click();
  await page.getByRole("status").filter({ hasText: "Topics saved." }).waitFor();
  const chosen = (await call("GET", `/contacts/${id}`)).topics.find((t) => t.name === topic);
  check(chosen?.subscribed === true, "the topic was not saved");

  // Its emails: the one sent above, with its history on demand.
  const emails = page.getByRole("region", { name: "Emails" });
  const sent = emails.getByRole("listitem").filter({ hasText: subject });
  await sent.waitFor();
  check(/Transactional, 0 opens, 0 clicks/.test(await sent.textContent()), `the email's line: ${await sent.textContent()}`);
  const history = emails.getByRole("button", { name: new RegExp(`^Show history of “${subject}”`) });
  await history.click();
  await emails.getByRole("listitem").filter({ hasText: /^Queued, / }).waitFor();
  check((await emails.getByRole("button", { name: /^Hide history/ }).getAttribute("aria-expanded")) === "true", "the history button is not expanded");
  await page.getByRole("region", { name: "Workflow executions" }).getByText("No workflow has run for this contact yet.").waitFor();
  await accessible(page, "contact (emails, a history shown)");

  // Its events timeline.
  await page.getByRole("listitem").filter({ hasText: "signed_up" }).first().waitFor();
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "contact");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Delete the contact added above, after confirming.
  const lin = await call("GET", `/contacts?search=${encodeURIComponent(added)}`);
  await page.goto(page.url().replace(/contacts\/.*$/, `contacts/${lin.data[0].id}`));
  await page.getByRole("heading", { name: added }).waitFor();
  await page.getByRole("row", { name: /city "Oslo"/ }).waitFor();
  await page.getByRole("button", { name: "Delete contact" }).click();
  await page.getByRole("group", { name: /^Delete lin-/ }).waitFor();
  await page.getByRole("button", { name: "Yes, delete the contact" }).click();
  await page.getByRole("status").filter({ hasText: `${added} was deleted.` }).waitFor();
  check((await call("GET", `/contacts?search=${encodeURIComponent(added)}`)).data.length === 0, "contact not deleted");
  console.log(`  contacts: %s s`, ((Date.now() - started) / 1000).toFixed(1));
}
