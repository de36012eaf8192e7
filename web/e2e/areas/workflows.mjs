// Workflows: draw a workflow of four steps with a condition (on the canvas and with the forms),
// see a 422 on its field and the graph problems enabling lists, enable it, drag a step (it keeps
// its place after a reload), trigger it with /v1/track and read the execution's timeline (and
// find it on the contact's page); filter and cancel executions.
import { accessible, check, fitsWidth, gone } from "../lib.mjs";

export default async function workflows(t) {
  const { page, call, run } = t;
  const started = Date.now();
  const email = `wf-${run}@example.com`;
  const template = await call("POST", "/templates", {
    name: `Welcome ${run}`,
    type: "TRANSACTIONAL",
    from: "hello@example.com",
    subject: "Welcome",
    body: "<p>Hello {{email}}</p>",
  });
  await call("POST", "/contacts", { email, data: { plan: "pro" } });

  // The list, and a new workflow.
  await page.getByRole("link", { name: "Workflows", exact: true }).click();
  await page.getByRole("heading", { name: "Workflows", exact: true }).waitFor();
  await page.getByText("0 workflows.").waitFor();
  await page.getByLabel("Workflow name").fill("Welcome pro users");
  await page.getByLabel("Trigger event").fill("signed_up");
  await page.getByRole("button", { name: "Create workflow" }).click();
  await page.getByRole("heading", { name: "Welcome pro users" }).waitFor();
  await page.getByText("No steps yet").waitFor();

  // 1. A condition on the contact's plan (the entry step).
  const add = page.getByRole("region", { name: "Add a step" });
  await add.getByLabel("Step type").selectOption({ label: "Condition" });
  await add.getByLabel("Field of rule 1").fill("data.plan");
  await add.getByLabel("Operator of rule 1").selectOption("equals");
  await add.getByLabel("Value of rule 1").fill("pro");
  await add.getByRole("button", { name: "Add step" }).click();
  await page.getByRole("status").filter({ hasText: "Added step 1. Condition." }).waitFor();

  // 2. Send email on "yes": refused without a template, the error on the template's field.
  await page.getByRole("button", { name: "Add step after 1. Condition (yes)" }).click();
  await add.getByLabel("Step type").selectOption({ label: "Send email" });
  check((await add.getByLabel("After", { exact: true }).inputValue()).endsWith(":yes"), "“Add step after” did not choose the yes way");
  await add.getByRole("button", { name: "Add step" }).click();
  const templateField = add.getByLabel("Template");
  await page.waitForFunction(() => document.querySelector("[aria-invalid=true]"));
  check((await templateField.getAttribute("aria-invalid")) === "true", "the 422 is not shown on the template field");
  const said = await page.locator(`[id="${await templateField.getAttribute("aria-describedby")}"]`).textContent();
  check(said.trim().length > 0, "the template field's error says nothing");
  await templateField.selectOption(template.id);
  await add.getByRole("button", { name: "Add step" }).click();
  await page.getByRole("status").filter({ hasText: "Added step 2. Send email. It follows 1. Condition (yes)." }).waitFor();

  // 3. Exit, not connected yet; 4. Update contact after the email.
  await add.getByLabel("Step type").selectOption({ label: "Exit" });
  await add.getByLabel("Reason (optional)").fill("not a pro");
  await add.getByRole("button", { name: "Add step" }).click();
  await page.getByRole("status").filter({ hasText: "Added step 3. Exit." }).waitFor();
  await add.getByLabel("Step type").selectOption({ label: "Update contact" });
  await add.getByLabel("After", { exact: true }).selectOption({ label: "2. Send email" });
  await add.getByLabel("Data to set (JSON object, optional)").fill('{"welcomed": true}');
  await add.getByRole("button", { name: "Add step" }).click();
  await page.getByRole("status").filter({ hasText: "Added step 4. Update contact." }).waitFor();

  // Enabling now lists the graph's problem: two entry steps.
  await page.getByRole("button", { name: "Enable workflow" }).click();
  await page.getByRole("heading", { name: "Problems to fix before enabling" }).waitFor();
  await page.getByText(/2 steps have no incoming transition/).waitFor();

  // Connect "no" to the exit on the canvas: drag from the way out to the step's way in.
  await page.getByRole("button", { name: "Fit View" }).click();
  await page.getByTitle("Way out “no” of 1. Condition").dragTo(page.getByTitle("Way in to 3. Exit"));
  await page.getByRole("status").filter({ hasText: "Connected 1. Condition (no) to 3. Exit." }).waitFor();
  const edge = page.getByRole("group", { name: /^From 1\. Condition \(no\) to 3\. Exit/ });
  // The keyboard removes it (focus, Enter selects, Delete), and the "Connect steps" form puts it back.
  await edge.focus();
  await page.keyboard.press("Enter");
  await page.keyboard.press("Delete");
  await page.getByRole("status").filter({ hasText: "Deleted the transition from 1. Condition to 3. Exit." }).waitFor();
  await gone(edge, "the deleted transition is still drawn");
  const connect = page.getByRole("region", { name: "Connect steps" });
  await connect.getByLabel("From step").selectOption({ label: "1. Condition" });
  await connect.getByLabel("Way out").selectOption("no");
  await connect.getByLabel("To step").selectOption({ label: "3. Exit" });
  await connect.getByRole("button", { name: "Connect" }).click();
  await page.getByRole("status").filter({ hasText: "Connected 1. Condition (no) to 3. Exit." }).waitFor();
  await edge.waitFor();

  // A step's panel from the keyboard: focus its node, Enter selects it.
  await page.getByRole("group", { name: /^Step 1\. Condition/ }).focus();
  await page.keyboard.press("Enter");
  const panel = page.getByRole("complementary", { name: "Step 1. Condition (Condition)" });
  await panel.waitFor();
  check((await panel.getByLabel("Value of rule 1").inputValue()) === "pro", "the panel does not show the step's config");
  // A nested 422 path (config.filter.groups[0].filters[0].value) lands on its rule's field.
  await panel.getByLabel("Operator of rule 1").selectOption("within");
  await panel.getByRole("button", { name: "Save step" }).click();
  const value = panel.getByLabel("Value of rule 1");
  await page.waitForFunction(() => document.querySelector("aside [aria-invalid=true]"));
  check((await value.getAttribute("aria-invalid")) === "true", "the 422 of the rule's value is not shown on it");
  await panel.getByLabel("Operator of rule 1").selectOption("equals");
  await panel.getByLabel("Value of rule 1").fill("pro");
  await panel.getByRole("button", { name: "Save step" }).click();
  await page.getByRole("status").filter({ hasText: "Saved step 1. Condition." }).waitFor();
  // One scan of the workflow page with everything on it: canvas, problems, panel, forms.
  await accessible(page, "workflow");

  await page.getByRole("button", { name: "Enable workflow" }).click();
  await page.getByRole("status").filter({ hasText: "The workflow is enabled" }).waitFor();
  await page.getByRole("button", { name: "Disable workflow" }).waitFor();
  check(await page.getByRole("button", { name: "Delete step 1. Condition" }).isDisabled(), "an enabled workflow's steps can be deleted");

  // A step dragged with the mouse (allowed while enabled) is stored where it was put and drawn
  // there after a reload. Each step got a place when it was added.
  const flowId = new URL(page.url()).pathname.split("/").pop();
  const stored = async () => (await call("GET", `/workflows/${flowId}`)).steps.map((s) => s.position);
  check((await stored()).every((p) => p && Number.isFinite(p.x) && Number.isFinite(p.y)), "a new step was given no position");
  const exit = page.getByRole("group", { name: /^Step 3\. Exit/ });
  const drawnAt = () => exit.evaluate((e) => e.style.transform);
  const before = await drawnAt();
  const box = await exit.boundingBox();
  await page.mouse.move(box.x + 24, box.y + box.height / 2);
  await page.mouse.down();
  for (let i = 1; i <= 8; i++) await page.mouse.move(box.x + 24 + i * 12, box.y + box.height / 2 + i * 8);
  await page.mouse.up();
  await page.getByRole("status").filter({ hasText: "Placed step 3. Exit." }).waitFor();
  const after = await drawnAt();
  check(after !== before, `the dragged step did not move (${before})`);
  const placed = (await stored())[2];
  check(after === `translate(${placed.x}px, ${placed.y}px)`, `the step is drawn at ${after}, stored at ${JSON.stringify(placed)}`);
  await page.reload();
  await exit.waitFor();
  check((await drawnAt()) === after, `after a reload the step is drawn at ${await drawnAt()}, not ${after}`);

  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "workflow");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Triggered by /v1/track: the execution runs the yes way to the end.
  await call("POST", "/v1/track", { email, event: "signed_up" });
  await page.getByRole("link", { name: "Executions" }).click();
  await page.getByRole("heading", { name: "Executions of Welcome pro users" }).waitFor();
  const link = page.getByRole("link", { name: /^exe_/ });
  await link.waitFor();
  await accessible(page, "executions");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "executions");
  await page.setViewportSize({ width: 1280, height: 900 });
  await link.click();
  await page.getByRole("heading", { name: /^Execution exe_/ }).waitFor();
  await page.getByRole("heading", { name: "4. Update contact: Completed" }).waitFor({ timeout: 15000 });
  await page.getByRole("heading", { name: "1. Condition: Completed" }).waitFor();
  await page.getByText("Condition, continued along “yes”").waitFor();
  await page.getByRole("heading", { name: "2. Send email: Completed" }).waitFor();
  check((await page.getByRole("heading", { name: /3\. Exit/ }).count()) === 0, "the exit ran for a pro contact");
  await page.getByText("Output of 2. Send email").click();
  await page.getByText(/"emailId"/).waitFor();
  await accessible(page, "execution");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "execution");
  await page.setViewportSize({ width: 1280, height: 900 });

  // The contact's page lists the execution, by the workflow's name, and the email it sent.
  const executionUrl = page.url();
  await page.getByRole("link", { name: /^cnt_/ }).click();
  await page.getByRole("heading", { name: email }).waitFor();
  const runs = page.getByRole("region", { name: "Workflow executions" });
  await runs.getByRole("listitem").filter({ hasText: /^Welcome pro users \w+, started / }).waitFor();
  await page.getByRole("region", { name: "Emails" }).getByRole("listitem").filter({ hasText: /^Welcome / }).waitFor();
  await accessible(page, "contact (an execution and its email)");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "contact (executions)");
  await page.setViewportSize({ width: 1280, height: 900 });
  await runs.getByRole("link", { name: /^Execution exe_/ }).click();
  await page.getByRole("heading", { name: /^Execution exe_/ }).waitFor();
  check(page.url() === executionUrl, `the contact's execution link opens ${page.url()}, not ${executionUrl}`);

  // Filtered by status; cancel all (none active).
  await page.getByRole("link", { name: "Back to the executions" }).click();
  await page.getByLabel("Status").selectOption({ label: "Completed" });
  await page.getByText("1 execution completed.").waitFor();
  await page.getByLabel("Status").selectOption({ label: "Failed" });
  await page.getByText("0 executions failed.").waitFor();
  await page.getByRole("button", { name: "Cancel all active executions" }).click();
  await page.getByRole("button", { name: "Yes, cancel them all" }).click();
  await page.getByRole("status").filter({ hasText: "Cancelled 0 executions." }).waitFor();

  // The list shows the counts.
  await page.getByRole("link", { name: "Workflows", exact: true }).click();
  await page.getByRole("row", { name: /Welcome pro users Enabled signed_up 4 1 in all, 0 active/ }).waitFor();
  await accessible(page, "workflows");
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "workflows");
  await page.setViewportSize({ width: 1280, height: 900 });
  console.log(`  workflows area: ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
