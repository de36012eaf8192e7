// Suppressions: add addresses by hand, search them (on the server, any case, paged), page
// through 60 more, remove one.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function ({ page, run, call }) {
  const a = `bounced-${run}@example.com`;
  const b = `asked-${run}@example.com`;
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Suppressions" }).click();
  await page.getByRole("heading", { name: "Suppressions", level: 1 }).waitFor();
  await page.getByText("No suppressed address.").waitFor();
  await accessible(page, "suppressions (none)");

  await page.getByLabel("Addresses to suppress").fill(`${a}, ${b}\n${a}`);
  await page.getByRole("button", { name: "Suppress" }).click();
  await page.getByRole("status").filter({ hasText: "2 added." }).waitFor();
  await page.getByText("2 addresses in all.").waitFor();
  await page.getByRole("row", { name: new RegExp(`${a} Added by hand`) }).waitFor();

  const search = async (text) => {
    await page.getByLabel("Search suppressed addresses").fill(text);
    await page.getByLabel("Search suppressed addresses").press("Enter");
  };
  await search("ASKED-");
  await page.getByText("1 address containing “ASKED-”.").waitFor();
  await page.getByRole("cell", { name: a, exact: true }).waitFor({ state: "detached" });
  await page.getByRole("cell", { name: b, exact: true }).waitFor();
  await search("");
  await page.getByText("2 addresses in all.").waitFor();

  // 60 more through the API: two pages of 50.
  const many = Array.from({ length: 60 }, (_, i) => `bulk-${i}-${run}@example.com`);
  await call("POST", "/suppressions", { emails: many });
  await page.getByLabel("Addresses to suppress").fill(a);
  await page.getByRole("button", { name: "Suppress" }).click();
  await page.getByRole("status").filter({ hasText: "0 added, 1 listed already." }).waitFor();
  await page.getByText("62 addresses in all.").waitFor();
  const pager = page.getByRole("navigation", { name: "Pages of suppressed addresses" });
  // A search pages too: 60 addresses contain "bulk-", 50 on the first page and 10 on the next.
  await search("bulk-");
  await page.getByText("60 addresses containing “bulk-”.").waitFor();
  await pager.getByRole("button", { name: "Next page" }).click();
  const rowsShown = () => page.getByRole("button", { name: /^Remove / }).count();
  for (let waited = 0; (await rowsShown()) !== 10; waited += 100) {
    check(waited < 10_000, `the search's second page shows ${await rowsShown()} addresses, not 10`);
    await new Promise((r) => setTimeout(r, 100));
  }
  check((await page.getByRole("button", { name: new RegExp(`^Remove (${a}|${b})`) }).count()) === 0, "the search's page shows an address without bulk-");
  check(await pager.getByRole("button", { name: "Next page" }).isDisabled(), "the search's last page offers a next one");
  await search("");
  await page.getByText("62 addresses in all.").waitFor();
  await pager.getByRole("button", { name: "Next page" }).click();
  await page.getByRole("cell", { name: a, exact: true }).waitFor();
  const rows = await page.getByRole("button", { name: /^Remove / }).count();
  check(rows === 12, `the second page shows ${rows} addresses, not 12`);
  await page.getByRole("button", { name: `Remove ${a}` }).click();
  await page.getByRole("status").filter({ hasText: `${a} removed` }).waitFor();
  await page.getByRole("cell", { name: a, exact: true }).waitFor({ state: "detached" });
  await pager.getByRole("button", { name: "Previous page" }).click();
  await page.getByText("61 addresses in all.").waitFor();
  await accessible(page, "suppressions");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "suppressions");
  await page.setViewportSize({ width: 1280, height: 900 });
}
