// Domains: add one, copy its records (Clipboard API), publish them in a DNS server on loopback
// (../dns.mjs at HERALD_TEST_DNS, herald's nameserver through .ci/with-server), "Verify now" until
// it is verified; delete another; the sending health beside them.
import { accessible, check, fitsWidth, gone } from "../lib.mjs";
import { startDns } from "../dns.mjs";

export default async function ({ page, context, base, run, call }) {
  const address = process.env.HERALD_TEST_DNS;
  check(address, "HERALD_TEST_DNS is not set: run through .ci/with-server, which gives herald a test nameserver");
  const dns = await startDns(address);
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  const name = `news-${run}.example.com`;

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Domains" }).click();
  await page.getByRole("heading", { name: "Domains", level: 1 }).waitFor();
  await page.getByText("No domain yet.").waitFor();
  await page.getByRole("heading", { name: "Sending health" }).waitFor();
  await page.getByText("Sending is on.").waitFor();
  await page.getByRole("row", { name: /Hard bounces 0 0 %/ }).waitFor();
  await accessible(page, "domains (none)");

  await page.getByLabel("Domain name").fill(name);
  await page.getByRole("button", { name: "Add domain" }).click();
  await page.getByRole("heading", { name, level: 1 }).waitFor();
  await page.getByText("Waiting for DNS records").waitFor();
  const table = page.getByRole("table", { name: `DNS records of ${name}` });
  const rows = table.getByRole("row");
  await rows.nth(1).waitFor();
  await accessible(page, "domain (pending)");

  // Each value through its copy button, then published as the page shows it.
  const count = (await rows.count()) - 1;
  check(count >= 3, `expected at least 3 records, the page shows ${count}`);
  let required = 0;
  for (let i = 1; i <= count; i++) {
    const cells = rows.nth(i).getByRole("cell");
    const type = (await cells.nth(0).textContent()).trim();
    const host = (await cells.nth(1).textContent()).trim();
    if ((await cells.nth(3).textContent()).trim() === "Required") required++;
    check((await cells.nth(4).textContent()).trim() === "Not found yet", `record ${type} ${host} is not pending`);
    await page.getByRole("button", { name: `Copy value of ${type} record ${host}`, exact: true }).click();
    await page.getByText(`Copied the value of the ${type} record at ${host}.`).waitFor();
    const value = await page.evaluate(() => navigator.clipboard.readText());
    check(value && (await cells.nth(2).textContent()).includes(value), `copied "${value}" is not the value shown for ${host}`);
    dns.publish(type, host, value);
  }
  check(required >= 3, `expected DKIM, SPF and the return-path MX required, ${required} are`);

  // The check made when the domain was added may be cached for a second: ask again until seen.
  let verified = false;
  for (let attempt = 0; attempt < 6 && !verified; attempt++) {
    if (attempt > 0) await page.waitForTimeout(1000);
    await page.getByRole("button", { name: "Verify now" }).click();
    const result = page.getByRole("status").filter({ hasText: /^Checked at/ });
    await result.waitFor();
    verified = / is verified: all \d+ required records are found\./.test(await result.textContent());
  }
  check(verified, "the domain is not verified after publishing its records");
  for (let i = 1; i <= count; i++) {
    const status = (await rows.nth(i).getByRole("cell").nth(4).textContent()).trim();
    check(status === "Found", `record ${i} says "${status}" after verification`);
  }
  await page.getByText("Verified", { exact: true }).first().waitFor();
  await accessible(page, "domain (verified)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "domain");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Another domain, deleted after a confirmation.
  const other = `old-${run}.example.com`;
  await call("POST", "/domains", { domain: other });
  await page.getByRole("link", { name: "Back to domains" }).click();
  await page.getByRole("row", { name: new RegExp(`${name.replace(/\./g, "\\.")} Verified`) }).waitFor();
  await page.getByRole("link", { name: other }).click();
  await page.getByRole("heading", { name: other, level: 1 }).waitFor();
  await page.getByRole("button", { name: "Delete domain" }).click();
  await page.getByRole("button", { name: `Yes, delete ${other}` }).click();
  await page.getByRole("heading", { name: "Domains", level: 1 }).waitFor();
  await page.getByRole("link", { name }).waitFor();
  await gone(page.getByRole("link", { name: other }), `${other} is still listed after its deletion`);
  await accessible(page, "domains");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "domains");
  await page.setViewportSize({ width: 1280, height: 900 });
}
