// Topics: create (opt-in by default, public), edit, delete; a topic a template names is refused
// (409) in plain words.
import { accessible, check, fitsWidth } from "../lib.mjs";

export default async function ({ page, run, call }) {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Topics" }).click();
  await page.getByRole("heading", { name: "Topics", level: 1 }).waitFor();
  await page.getByText("No topic yet.").waitFor();
  await accessible(page, "topics (none)");

  const news = `Product news ${run}`;
  await page.getByLabel("Topic name").fill(news);
  await page.getByLabel("Topic description").fill("New features, once a month.");
  check(await page.getByLabel("Everyone (opt-in by default)").isChecked(), "opt-in is not the default choice");
  await page.getByLabel("Visibility").selectOption("PUBLIC");
  await page.getByRole("button", { name: "Create topic" }).click();
  await page.getByRole("status").filter({ hasText: `Topic “${news}” created.` }).waitFor();
  await page.getByRole("heading", { name: news }).waitFor();
  await page.getByText("Contacts are subscribed until they opt out. Listed on the preference page.").waitFor();

  const digest = `Digest ${run}`;
  await page.getByLabel("Topic name").fill(digest);
  await page.getByLabel("No one (opt-out by default)").check();
  await page.getByRole("button", { name: "Create topic" }).click();
  await page.getByRole("heading", { name: digest }).waitFor();
  await page.getByText("Contacts are subscribed only once they opt in. Not listed on the preference page.").waitFor();
  await accessible(page, "topics");

  // Edit: a new name and private.
  const renamed = `Weekly digest ${run}`;
  await page.getByRole("button", { name: `Edit ${digest}` }).click();
  const form = page.getByRole("form", { name: `Edit topic ${digest}` });
  await form.getByLabel("Name").fill(renamed);
  await form.getByLabel("Visibility").selectOption("PUBLIC");
  await accessible(page, "topic (editing)");
  await form.getByRole("button", { name: "Save topic" }).click();
  await page.getByRole("heading", { name: renamed }).waitFor();
  await page.getByText("Contacts are subscribed only once they opt in. Listed on the preference page.").waitFor();

  // Named by a template: refused in plain words.
  const topics = await call("GET", "/topics");
  const topic = topics.find((t) => t.name === news);
  await call("POST", "/templates", { name: `News ${run}`, subject: "News", body: "<p>News</p>", type: "MARKETING", topicId: topic.id });
  await page.getByRole("button", { name: `Delete ${news}` }).click();
  await page.getByRole("button", { name: `Yes, delete ${news}` }).click();
  await page.getByRole("alert").filter({ hasText: `“${news}” is still used by a template` }).waitFor();
  await page.getByRole("heading", { name: news }).waitFor();

  await page.getByRole("button", { name: `Delete ${renamed}` }).click();
  await page.getByRole("button", { name: `Yes, delete ${renamed}` }).click();
  await page.getByRole("status").filter({ hasText: `Topic “${renamed}” deleted.` }).waitFor();
  await page.getByRole("heading", { name: renamed }).waitFor({ state: "detached" });
  await page.setViewportSize({ width: 390, height: 900 });
  await fitsWidth(page, "topics");
  await page.setViewportSize({ width: 1280, height: 900 });
}
