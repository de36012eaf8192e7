// Billing with billing off (the test server has no billing plugin): said plainly, consumption
// with its figures, caps set and cleared, no checkout or portal.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function ({ page }) {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Billing" }).click();
  await page.getByRole("heading", { name: "Billing", level: 1 }).waitFor();
  await page.getByText("Billing is off in this deployment").waitFor();
  await page.getByText(/^Contacts created: \d+ used \(no cap\)$/).waitFor();
  await page.getByText("No invoice: billing is off.").waitFor();
  check((await page.getByRole("button", { name: "Go to checkout" }).count()) === 0, "checkout shown with billing off");
  check((await page.getByRole("button", { name: "Open the billing portal" }).count()) === 0, "portal shown with billing off");
  await accessible(page, "billing");

  await page.getByLabel("Contacts created per month").fill("1,000,000");
  await page.getByLabel("Events tracked per month").fill("lots");
  await page.getByRole("button", { name: "Save caps" }).click();
  await page.getByRole("alert").filter({ hasText: "Events tracked: enter a whole number" }).waitFor();
  await page.getByLabel("Events tracked per month").fill("");
  await page.getByRole("button", { name: "Save caps" }).click();
  await page.getByRole("status").filter({ hasText: "Caps saved." }).waitFor();
  await page.getByText(/^Contacts created: \d+ of 1,000,000 used \(\d+ %\)$/).waitFor();
  await accessible(page, "billing (capped)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "billing");
  await page.setViewportSize({ width: 1280, height: 900 });

  // No cap again, for the areas after this one.
  await page.getByLabel("Contacts created per month").fill("");
  await page.getByRole("button", { name: "Save caps" }).click();
  await page.getByText(/^Contacts created: \d+ used \(no cap\)$/).waitFor();
}
