// Project settings: rename (seen in the project switcher), a field error from the API shown on its
// field, key rotation through the dialog (the old secret key refused at once, the new one
// working), the sending health, and reset and deletion behind a typed confirmation on a project
// made for it.
import { accessible, caller, check, fitsWidth } from "../lib.mjs";

/** GET /contacts with `key`: the HTTP status. */
async function statusWith(base, key) {
  const r = await fetch(`${base}/contacts?limit=1`, { headers: { Authorization: `Bearer ${key}` } });
  await r.arrayBuffer();
  return r.status;
}

export default async function settings(t) {
  const { page, base, run } = t;
  const switcher = page.getByRole("combobox", { name: "Current project" });
  const current = () => switcher.evaluate((s) => s.selectedOptions[0]?.textContent);
  const original = await current();

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Settings" }).click();
  await page.getByRole("heading", { name: "Project settings" }).waitFor();
  await page.getByRole("heading", { name: "Sending health" }).waitFor();
  await page.getByText("Sending is on.").waitFor();
  await page.getByRole("row", { name: /Hard bounces/ }).waitFor();
  await accessible(page, "settings");

  // Renamed: the switcher says the new name.
  const name = page.getByRole("textbox", { name: "Project name" });
  check((await name.inputValue()) === original, `the name field says ${await name.inputValue()}, not ${original}`);
  const renamed = `Letters ${run}`;
  await name.fill(renamed);
  await page.getByRole("checkbox", { name: "Track clicks" }).uncheck();
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByText("Settings saved.").waitFor();
  await page.waitForFunction(
    (n) => document.querySelector("header select")?.selectedOptions[0]?.textContent === n,
    renamed,
  );
  const project = (await page.evaluate(() => fetch("/users/@me/projects").then((r) => r.json()))).find((p) => p.name === renamed);
  check(project && project.trackClicks === false && project.trackOpens === true, `not saved: ${JSON.stringify(project)}`);

  // The API's error on a field is shown on that field.
  const transport = page.getByRole("textbox", { name: "Transport" });
  await transport.fill(`nowhere-${run}`);
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByRole("alert").waitFor();
  check((await transport.getAttribute("aria-invalid")) === "true", "the transport field is not marked invalid");
  const said = await transport.evaluate((e) =>
    e.getAttribute("aria-describedby").split(" ").map((id) => document.getElementById(id).textContent).join(" "),
  );
  check(/no transport named `nowhere-/.test(said), `the transport field's error is not read with it: ${said}`);
  await accessible(page, "settings (field error)");
  await transport.fill("");
  await name.fill(original);
  await page.getByRole("checkbox", { name: "Track clicks" }).check();
  await page.getByRole("button", { name: "Save settings" }).click();
  await page.getByText("Settings saved.").waitFor();
  await page.waitForFunction((n) => document.querySelector("header select")?.selectedOptions[0]?.textContent === n, original);

  // Rotation: the dialog says the old keys stop at once; Cancel changes nothing.
  const old = t.secret;
  const hint = project.secretKeyHint.replace(/…$/, "");
  check(old.startsWith(hint), `the secret key ${old.slice(0, 8)}… is not the project's (${project.secretKeyHint})`);
  await page.getByText(project.secretKeyHint, { exact: true }).waitFor();
  await page.getByRole("button", { name: "Rotate keys" }).click();
  const dialog = page.getByRole("dialog", { name: "Rotate the API keys?" });
  await dialog.waitFor();
  check(/stop working at once/.test(await dialog.textContent()), "the dialog does not say the old keys stop at once");
  await accessible(page, "rotate keys dialog");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await dialog.waitFor({ state: "hidden" });
  check((await statusWith(base, old)) === 200, "the key stopped working without a rotation");

  await page.getByRole("button", { name: "Rotate keys" }).click();
  await dialog.getByRole("button", { name: "Rotate keys now" }).click();
  const shown = page.getByRole("status").filter({ hasText: "New keys" });
  await shown.waitFor();
  const fresh = await shown.getByText(/^sk_[A-Za-z0-9_-]+$/).textContent();
  check(fresh && fresh !== old, "the new secret key is not shown");
  check((await statusWith(base, old)) === 401, "the old secret key still works");
  check((await statusWith(base, fresh)) === 200, "the new secret key does not work");
  await page.getByText(`${fresh.slice(0, 8)}`, { exact: false }).first().waitFor();
  await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  await page.getByRole("button", { name: "Copy the new secret key" }).click();
  await page.getByText("Copied.").waitFor();
  check((await page.evaluate(() => navigator.clipboard.readText())) === fresh, "the copied text is not the new key");
  await accessible(page, "settings (keys rotated)");
  // The areas after this one call the API with the new key.
  t.secret = fresh;
  t.call = caller(base, fresh);

  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "settings");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Reset and deletion, on a project made for them: the name must be typed.
  const scratch = `Scratch ${run}`;
  const made = await page.evaluate(
    (n) => fetch("/users/@me/projects", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name: n }) }).then((r) => r.json()),
    scratch,
  );
  await page.reload();
  await switcher.selectOption({ label: scratch });
  await page.getByRole("heading", { name: "Project settings" }).waitFor();
  await page.getByText(`Settings of ${scratch}`).waitFor();
  await fetch(`${base}/contacts`, {
    method: "POST",
    headers: { Authorization: `Bearer ${made.secretKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ email: `scratch-${run}@example.com` }),
  }).then((r) => check(r.ok, `the scratch contact: ${r.status}`));

  await page.getByRole("button", { name: "Reset project" }).click();
  const reset = page.getByRole("dialog", { name: `Reset ${scratch}?` });
  await reset.waitFor();
  const confirmReset = reset.getByRole("button", { name: "Reset the project" });
  check(await confirmReset.isDisabled(), "reset is possible before the name is typed");
  await reset.getByRole("textbox", { name: /Type the project's name/ }).fill("wrong");
  check(await confirmReset.isDisabled(), "reset is possible with the wrong name typed");
  await reset.getByRole("textbox", { name: /Type the project's name/ }).fill(scratch);
  await accessible(page, "reset dialog");
  await confirmReset.click();
  await page.getByText(/The project was reset: 1 contact, /).waitFor();

  await page.getByRole("button", { name: "Delete project" }).click();
  const del = page.getByRole("dialog", { name: `Delete ${scratch}?` });
  await del.getByRole("textbox", { name: /Type the project's name/ }).fill(scratch);
  await del.getByRole("button", { name: "Delete the project" }).click();
  await page.getByRole("heading", { name: "Projects" }).waitFor();
  await page.waitForFunction(
    (n) => ![...document.querySelectorAll("header select option")].some((o) => o.textContent === n),
    scratch,
  );
  check((await statusWith(base, made.secretKey)) === 401, "a deleted project's key still works");
  await switcher.selectOption({ label: original });
  check((await current()) === original, `back on ${await current()}, not ${original}`);
}
