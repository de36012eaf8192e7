// Campaigns: compose one to a segment, see who will receive it, schedule it in a time zone and
// cancel it, then send a copy now and watch it reach SENT with its results.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function (t) {
  const { page, call, run } = t;
  const started = Date.now();
  const emails = [`reader-a-${run}@example.com`, `reader-b-${run}@example.com`, `reader-c-${run}@example.com`];
  await call("POST", "/contacts", { email: emails[0] });
  await call("POST", "/contacts", { email: emails[1] });
  await call("POST", "/contacts", { email: emails[2], subscribed: false });
  const segment = await call("POST", "/segments", { name: `Readers ${run}`, type: "STATIC" });
  await call("POST", `/segments/${segment.id}/members`, { emails });
  await call("POST", "/contacts", { email: `cohort-${run}@example.com`, data: { cohort: run } });

  await page.getByRole("link", { name: "Campaigns", exact: true }).click();
  await page.getByRole("heading", { name: "Campaigns" }).waitFor();
  // Other areas may have made campaigns before this one.
  const count = page.getByText(/^\d+ campaigns?\.$/);
  await count.waitFor();
  const before = Number((await count.textContent()).match(/\d+/)[0]);
  await accessible(page, "campaigns (before)");

  // Compose inline, to the segment.
  await page.getByRole("link", { name: "New campaign" }).click();
  await page.getByRole("heading", { name: "New campaign" }).waitFor();
  await page.getByText("Save the draft to count who will receive it.").waitFor();
  await accessible(page, "new campaign");
  await page.getByLabel("Campaign name").fill("December news");
  await page.getByLabel("Subject", { exact: true }).fill("News for {{ contact.email }}");
  await page.getByLabel("Body (HTML)").fill("<p>The news of the month.</p>");
  await page.getByLabel("From address").fill("news@example.com");
  await page.getByLabel("From name").fill("The News");
  await page.getByRole("radio", { name: "The contacts of a segment" }).check();
  await page.getByLabel("Segment", { exact: true }).selectOption(segment.id);
  await page.getByRole("button", { name: "Save draft" }).click();
  await page.getByRole("heading", { name: "December news" }).waitFor();
  await page.getByText("Status: Draft").waitFor();
  // The live count: two subscribed members, the third left out and why.
  await page.getByText("2 contacts will receive it.").waitFor();
  await page.getByText("1 contact has unsubscribed").waitFor();
  await accessible(page, "campaign (draft)");

  // Changing the audience saves the draft and counts again: all contacts of the project.
  const id = page.url().split("/").pop();
  await page.getByRole("radio", { name: "All contacts" }).check();
  for (let i = 0; (await call("GET", `/campaigns/${id}`)).audienceType !== "ALL"; i++) {
    check(i < 50, "the audience change was not saved");
    await page.waitForTimeout(100);
  }
  const everyone = (await call("POST", `/campaigns/${id}/audience`)).recipients;
  check(everyone >= 4, `only ${everyone} of all contacts would receive it`);
  await page.getByText(`${everyone} contacts will receive it.`).waitFor();
  // Back to the segment (still chosen), then without one and with it again.
  await page.getByRole("radio", { name: "The contacts of a segment" }).check();
  await page.getByText("2 contacts will receive it.").waitFor();
  await page.getByLabel("Segment", { exact: true }).selectOption("");
  await page.getByText("Choose a segment to count who will receive it.").waitFor();
  await page.getByLabel("Segment", { exact: true }).selectOption(segment.id);
  await page.getByText("2 contacts will receive it.").waitFor();
  check((await call("GET", `/campaigns/${id}`)).segmentId === segment.id, "the audience change was not saved");

  // A filter built visually: counted once every condition is filled in, saved as it is.
  await page.getByRole("radio", { name: "The contacts matching a filter" }).check();
  const first = page.getByRole("group", { name: "Condition 1" });
  await first.getByLabel("Field").selectOption({ label: "cohort" });
  await page.getByText("Fill in every condition of the filter to count who will receive it.").waitFor();
  await first.getByLabel("Value").fill(run);
  await page.getByText("1 contact will receive it.").waitFor();
  const filtered = await call("GET", `/campaigns/${id}`);
  check(filtered.audienceType === "FILTERED" && JSON.stringify(filtered.audienceFilter).includes(run), "the filter was not saved");
  await accessible(page, "campaign (filter)");
  await page.getByRole("radio", { name: "The contacts of a segment" }).check();
  await page.getByText("2 contacts will receive it.").waitFor();

  // Schedule at 09:30 two days ahead in Tokyo (UTC+9, no summer time): 00:30 UTC.
  const day = new Date(Date.now() + 2 * 86_400_000).toISOString().slice(0, 10);
  await page.getByLabel("Date and time", { exact: true }).fill(`${day}T09:30`);
  await page.getByLabel("Time zone", { exact: true }).selectOption("Asia/Tokyo");
  const utc = `${day}T00:30:00.000Z`;
  const shown = await page.evaluate(
    (at) => new Intl.DateTimeFormat(undefined, { timeZone: "UTC", dateStyle: "medium", timeStyle: "short" }).format(new Date(at)),
    utc,
  );
  await page.getByText(`That is ${shown} UTC.`).waitFor();
  await page.getByLabel("At this date and time in each contact's own time zone").check();
  await page.getByText("in its own time zone").first().waitFor();
  await page.getByLabel("At this date and time in each contact's own time zone").uncheck();
  await page.getByRole("button", { name: "Schedule", exact: true }).click();
  await page.getByText("Status: Scheduled").waitFor();
  const scheduled = await call("GET", `/campaigns/${id}`);
  check(new Date(scheduled.scheduledAt).toISOString() === utc, `scheduled at ${scheduled.scheduledAt}, expected ${utc}`);

  // A scheduled campaign is called off by cancelling it (the API has no unschedule).
  await page.getByRole("button", { name: "Cancel the campaign" }).click();
  const dialog = page.getByRole("dialog", { name: "Cancel this campaign?" });
  await dialog.waitFor();
  await dialog.getByRole("button", { name: "Cancel the campaign" }).click();
  await page.getByText("Status: Cancelled").waitFor();

  // A copy, sent now after a test.
  await page.getByRole("button", { name: "Duplicate" }).click();
  await page.getByRole("heading", { name: "December news (copy)" }).waitFor();
  await page.getByText("2 contacts will receive it.").waitFor();
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "campaign (draft)");
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.getByLabel("Send a test to").fill(emails[0]);
  await page.getByRole("button", { name: "Send a test" }).click();
  await page.getByText(`is on its way to ${emails[0]}`).waitFor();
  await page.getByRole("button", { name: "Send now…" }).click();
  const confirm = page.getByRole("dialog", { name: "Send “December news (copy)” now?" });
  await confirm.getByText("2 contacts will receive it.").waitFor();
  await accessible(page, "send now dialog");
  await confirm.getByRole("button", { name: "Send to 2 contacts" }).click();
  await page.getByText("Status: Sent").waitFor({ timeout: 20_000 });
  await page.getByRole("row", { name: /^Sent 2\b/ }).waitFor();
  await page.getByRole("row", { name: /^Recipients 2\b/ }).waitFor();
  await page.getByRole("figure").waitFor();
  await page.getByText("The chart as a table").click();
  await page.getByRole("table", { name: /^Emails per hour/ }).waitFor();
  await accessible(page, "campaign (sent)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "campaign (sent)");

  // The list, with both and the sent one's figures.
  await page.getByRole("link", { name: "All campaigns" }).click();
  await page.getByText(`${before + 2} campaigns.`).waitFor();
  await page.getByRole("row", { name: /December news \(copy\) Sent .* 2 2 0 \(0 %\) 0 \(0 %\)/ }).waitFor();
  await page.getByRole("row", { name: /December news Cancelled/ }).waitFor();
  await fitsWidth(page, "campaigns");
  await accessible(page, "campaigns (390 px)");
  await page.setViewportSize({ width: 1280, height: 900 });
  console.log(`  campaigns: ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
