// Segments: a dynamic segment built in the visual filter builder with a nested group
// (plan = "pro" AND (country = "FR" OR visits > 3)), counted live before it is saved, its exact
// members, refresh, edit (the builder reads the saved filter back, the count follows), and a
// static segment's members added and removed.
import { accessible, check, fitsWidth, gone } from "../lib.mjs";

export default async function ({ page, run, call }) {
  const started = Date.now();
  const email = (n) => `seg-${n}-${run}@example.com`;
  // In: a (FR), b (visits 5). Out: c (pro but neither), d (FR and visits 9 but not pro), e (no data).
  await call("POST", "/contacts", { email: email("a"), data: { plan: "pro", country: "FR", visits: 1 } });
  await call("POST", "/contacts", { email: email("b"), data: { plan: "pro", country: "DE", visits: 5 } });
  await call("POST", "/contacts", { email: email("c"), data: { plan: "pro", country: "DE", visits: 2 } });
  await call("POST", "/contacts", { email: email("d"), data: { plan: "free", country: "FR", visits: 9 } });
  await call("POST", "/contacts", { email: email("e") });

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Segments" }).click();
  await page.getByRole("heading", { name: "Segments", level: 1 }).waitFor();
  await page.getByRole("link", { name: "New segment" }).click();
  await page.getByRole("heading", { name: "New segment" }).waitFor();
  const name = `Pro in France or active ${run}`;
  await page.getByLabel("Name").fill(name);

  const condition = (n) => page.getByRole("group", { name: `Condition ${n}`, exact: true });
  await condition(1).getByLabel("Field").selectOption({ label: "plan" });
  await condition(1).getByLabel("Value").fill("pro");
  // A nested group: it starts matching any of its items, under a top group matching all.
  await page.getByRole("button", { name: "Add group", exact: true }).click();
  const group = page.getByRole("group", { name: "Group 1", exact: true });
  await group.waitFor();
  check(await condition(2).getByLabel("Field").evaluate((e) => e === document.activeElement), "the new group's field is not focused");
  check((await group.getByLabel("Group 1: match").inputValue()) === "OR", "the nested group does not match any");
  await condition(2).getByLabel("Field").selectOption({ label: "country" });
  await condition(2).getByLabel("Value").fill("FR");
  await group.getByRole("button", { name: "Add condition to group 1" }).click();
  await condition(3).getByLabel("Field").selectOption({ label: "visits" });
  await condition(3).getByLabel("Operator").selectOption({ label: "is greater than" });
  await condition(3).getByLabel("Value").fill("3");
  // An operator without a value drops the value; back to one that takes it, it starts empty.
  await condition(3).getByLabel("Operator").selectOption({ label: "is set" });
  check((await condition(3).getByLabel("Value").count()) === 0, "`is set` still shows a value");
  await condition(3).getByLabel("Operator").selectOption({ label: "is greater than" });
  check((await condition(3).getByLabel("Value").inputValue()) === "", "the value was not reset");
  await condition(3).getByLabel("Value").fill("3");

  // With the keyboard alone: add a condition, then remove it; the focus follows.
  await page.getByRole("button", { name: "Add condition", exact: true }).focus();
  await page.keyboard.press("Enter");
  await condition(4).waitFor();
  check(await condition(4).getByLabel("Field").evaluate((e) => e === document.activeElement), "the new condition is not focused");
  await condition(4).getByRole("button", { name: "Remove condition 4" }).focus();
  await page.keyboard.press("Enter");
  await condition(4).waitFor({ state: "detached" });
  check(
    await page.getByRole("button", { name: "Add condition", exact: true }).evaluate((e) => e === document.activeElement),
    "the focus is lost after removing a condition",
  );
  // The unsaved filter is counted live, with the contacts it selects.
  await page.getByRole("status").filter({ hasText: "2 contacts match now." }).waitFor();
  const matching = (await page.getByRole("list", { name: "Contacts that match" }).getByRole("link").allTextContents()).sort();
  check(JSON.stringify(matching) === JSON.stringify([email("a"), email("b")]), `the live count lists ${matching.join(", ")}`);
  await accessible(page, "new segment (builder)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "new segment (builder)");
  await page.setViewportSize({ width: 1280, height: 900 });

  await page.getByRole("button", { name: "Create segment" }).click();
  await page.getByRole("heading", { name }).waitFor();
  await page.getByText("2 members now; page 1 of 1.").waitFor();
  const members = page.getByRole("table", { name: `Members of ${name}` });
  const listed = (await members.getByRole("link").allTextContents()).sort();
  check(JSON.stringify(listed) === JSON.stringify([email("a"), email("b")]), `members: ${listed.join(", ")}`);
  await page.getByText('plan is "pro" and (country is "FR" or visits is greater than 3)').waitFor();
  await page.getByRole("button", { name: "Refresh count" }).click();
  await page.getByRole("status").filter({ hasText: "Counted: 2 members now." }).waitFor();
  await accessible(page, "segment (dynamic)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "segment (dynamic)");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Edit: the builder reads the saved filter back; tightening it changes the members live.
  await page.getByRole("link", { name: "Edit segment" }).click();
  await page.getByRole("heading", { name: `Edit segment ${name}` }).waitFor();
  check((await condition(3).getByLabel("Value").inputValue()) === "3", "the saved filter was not read back");
  check((await page.getByRole("group", { name: "Group 1", exact: true }).getByLabel("Group 1: match").inputValue()) === "OR", "group logic lost");
  await condition(3).getByLabel("Value").fill("6");
  await page.getByRole("status").filter({ hasText: "1 contact matches now." }).waitFor();
  await accessible(page, "edit segment");
  await page.getByRole("button", { name: "Save segment" }).click();
  await page.getByRole("heading", { name }).waitFor();
  await page.getByText("1 member now; page 1 of 1.").waitFor();
  await members.getByRole("link", { name: email("a") }).waitFor();

  // A static segment: members added by address (an unknown one reported), then removed.
  await page.getByRole("link", { name: "Back to segments" }).click();
  await page.getByRole("row", { name: new RegExp(`${name} Dynamic 1`) }).waitFor();
  await page.getByRole("link", { name: "New segment" }).click();
  const vip = `VIP ${run}`;
  await page.getByLabel("Name").fill(vip);
  await page.getByRole("radio", { name: /^Static/ }).check();
  check((await page.getByRole("group", { name: "Condition 1" }).count()) === 0, "a static segment shows conditions");
  await page.getByRole("button", { name: "Create segment" }).click();
  await page.getByRole("heading", { name: vip }).waitFor();
  await page.getByLabel("Email addresses to add").fill(`${email("c")}\nnobody-${run}@example.com`);
  await page.getByRole("button", { name: "Add members" }).click();
  await page.getByRole("status").filter({ hasText: `Added 1 member. No contact has nobody-${run}@example.com.` }).waitFor();
  await page.getByRole("table", { name: `Members of ${vip}` }).getByRole("link", { name: email("c") }).waitFor();
  await accessible(page, "segment (static)");
  await page.getByRole("button", { name: `Remove ${email("c")}` }).click();
  await page.getByRole("status").filter({ hasText: `Removed ${email("c")} from the segment.` }).waitFor();
  await page.getByText("No member.").waitFor();

  // Delete: refused (409, said plainly) while a scheduled campaign sends to it, then done.
  const segments = await call("GET", "/segments");
  const vipId = segments.find((s) => s.name === vip).id;
  await call("POST", "/domains", { domain: `seg-${run}.example.com` });
  const campaign = await call("POST", "/campaigns", {
    name: `To VIP ${run}`,
    subject: "Hello",
    body: "<p>Hello</p>",
    from: `news@seg-${run}.example.com`,
    audienceType: "SEGMENT",
    segmentId: vipId,
  });
  const campaignId = campaign.data?.id ?? campaign.id;
  await call("POST", `/campaigns/${campaignId}/send`, { scheduledFor: new Date(Date.now() + 86_400_000).toISOString() });
  await page.getByRole("button", { name: "Delete segment" }).click();
  await page.getByRole("button", { name: "Yes, delete segment" }).click();
  await page.getByRole("alert").filter({ hasText: `the segment is the audience of active campaigns: To VIP ${run}` }).waitFor();
  await call("POST", `/campaigns/${campaignId}/cancel`);
  await page.getByRole("button", { name: "Delete segment" }).click();
  await page.getByRole("button", { name: "Yes, delete segment" }).click();
  await page.getByRole("heading", { name: "Segments", level: 1 }).waitFor();
  await page.getByRole("link", { name }).waitFor();
  await gone(page.getByRole("link", { name: vip }), "the deleted segment is still listed");
  await accessible(page, "segments");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "segments");
  await page.setViewportSize({ width: 1280, height: 900 });
  console.log(`  segments area: ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
