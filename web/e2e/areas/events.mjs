// Events, the activity feed and analytics, with data: tracked events (one name used by a
// segment), emails sent; the feed picks up a new email by itself and says so; pause; the
// analytics charts with their tables; delete an event name. axe and 390 px on each page.
import { accessible, check, fitsWidth } from "../lib.mjs";

async function narrow(page, name) {
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, name);
  await page.setViewportSize({ width: 1280, height: 900 });
}

export default async function ({ page, run, call }) {
  const started = Date.now();
  const ada = `ada-${run}@example.com`;
  const name = `plan_upgraded_${run}`;
  for (const plan of ["team", "business", "enterprise"]) {
    await call("POST", "/v1/track", { email: ada, event: name, data: { plan } });
  }
  await call("POST", "/v1/track", { email: ada, event: `report_viewed_${run}` });
  const segment = `Upgraders ${run}`;
  await call("POST", "/segments", {
    name: segment,
    type: "DYNAMIC",
    condition: { logic: "AND", groups: [{ filters: [{ field: `event.${name}`, operator: "triggered" }] }] },
  });
  const send = (subject) =>
    call("POST", "/v1/send", { to: ada, from: "news@example.com", subject, body: "<p>Hello</p>", subscribed: true });
  await send(`First news ${run}`);

  // The names with their counts and the figures.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Events" }).click();
  await page.getByRole("heading", { name: "Events", level: 1 }).waitFor();
  await page.getByRole("row", { name: new RegExp(`^${name} 3 `) }).waitFor();
  await page.getByRole("row", { name: new RegExp(`^report_viewed_${run} 1 `) }).waitFor();
  await page.getByRole("definition").first().waitFor();
  await accessible(page, "events");
  await narrow(page, "events");

  // Where a name is used.
  await page.getByRole("link", { name }).click();
  await page.getByRole("heading", { name: `Event ${name}` }).waitFor();
  await page.getByText("3 events have this name.").waitFor();
  await page.getByRole("link", { name: segment }).waitFor();
  await accessible(page, "event name");
  await narrow(page, "event name");

  // The activity feed: the email sent above, then a new one found by polling and announced.
  await page.getByRole("link", { name: "Activity feed" }).click();
  await page.getByRole("heading", { name: "Activity" }).waitFor();
  await page.getByRole("row", { name: new RegExp(`First news ${run}`) }).first().waitFor();
  await send(`Second news ${run}`);
  await page.getByRole("row", { name: new RegExp(`Second news ${run}`) }).first().waitFor({ timeout: 15000 });
  await page.getByRole("status").filter({ hasText: /new entr(y|ies) in the activity feed/ }).waitFor();
  await page.getByRole("button", { name: "Pause live updates" }).click();
  await page.getByText("Live updates are paused.").waitFor();
  await accessible(page, "activity");
  await narrow(page, "activity");
  await page.getByRole("button", { name: "Resume live updates" }).click();
  await page.getByText(/Live: checked every/).waitFor();

  // Analytics: the emails over time, the top events, each chart with its table.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Analytics" }).click();
  await page.getByRole("heading", { name: "Analytics", level: 1 }).waitFor();
  const series = page.getByRole("figure", { name: /^Emails, last 30 days/ });
  await series.waitFor();
  check(/Sent: [1-9]/.test(await series.textContent()), "the time series shows no email sent");
  await series.getByText("Emails per day as a table").click();
  await series.getByRole("table", { name: "Emails per day" }).waitFor();
  const events = page.getByRole("figure", { name: /^Most tracked events/ });
  await events.getByRole("row", { name: new RegExp(`^${name} 3$`) }).waitFor();
  check((await events.locator("svg").count()) > 0, "the top events chart is not drawn");
  await accessible(page, "analytics");
  await page.getByLabel("Period").selectOption({ label: "Last 24 hours" });
  await page.getByRole("figure", { name: /^Emails, last 24 hours, per hour/ }).waitFor();
  await narrow(page, "analytics");

  // Delete the name's events, after confirming; the service's own names cannot be.
  await events.getByRole("link", { name }).click();
  await page.getByRole("heading", { name: `Event ${name}` }).waitFor();
  await page.getByRole("button", { name: "Delete these events" }).click();
  await page.getByRole("group", { name: /used by 1 segment/ }).waitFor();
  await page.getByRole("button", { name: "Yes, delete the events" }).click();
  await page.getByRole("status").filter({ hasText: `Deleted 3 events named ${name}.` }).waitFor();
  await page.getByText("0 events have this name.").waitFor();
  const left = await call("GET", `/events/${name}/usage`);
  check(left.count === 0, `events left: ${left.count}`);
  console.log(`  events: %s s`, ((Date.now() - started) / 1000).toFixed(1));
}
