// Shared by the browser tests: checks, the accessibility scan, the width check, the API and the
// mail the server wrote.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { AxeBuilder } from "@axe-core/playwright";

export function check(ok, message) {
  if (!ok) throw new Error(message);
}

export const problems = [];
export async function accessible(page, name) {
  // A sandboxed frame (an email's preview) runs no script: axe cannot enter it and would wait
  // forever; its content is the email's, not the dashboard's.
  const result = await new AxeBuilder({ page }).exclude("iframe[sandbox]").analyze();
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  for (const v of bad) {
    problems.push(`${name}: ${v.id} (${v.impact}): ${v.help}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
  }
  console.log(`  axe ${name}: ${bad.length} serious/critical of ${result.violations.length} violations`);
}

export async function fitsWidth(page, name) {
  const { scroll, width, wide } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    width: window.innerWidth,
    wide: [...document.querySelectorAll("main *")]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth)
      .map((e) => e.tagName.toLowerCase())
      .slice(0, 5),
  }));
  check(scroll <= width, `${name} scrolls sideways at ${width} px (content ${scroll} px wide: ${wide.join(", ")})`);
}

/** The API with the project's secret key: `call("POST", "/contacts", {...})` answers the JSON body. */
export function caller(base, secret) {
  return async (method, path, body) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${secret}`, ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    check(r.ok, `${method} ${path}: ${r.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : null;
  };
}

/** Waits (up to 10 s) until nothing matches `locator`: a list may refresh just after its message. */
export async function gone(locator, message) {
  for (let waited = 0; (await locator.count()) > 0; waited += 100) {
    check(waited < 10_000, message);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Undoes quoted-printable (soft line breaks, =XX) and base64 bodies, so links are whole. */
export function decoded(mail) {
  const qp = mail.replace(/=\r?\n/g, "").replace(/=([0-9A-F]{2})/g, (_, h) => String.fromCharCode(parseInt(h, 16)));
  const b64 = [...mail.matchAll(/Content-Transfer-Encoding: base64\r?\n(?:[^\r\n]+\r?\n)*?\r?\n([A-Za-z0-9+/=\r\n]+)/gi)]
    .map((m) => Buffer.from(m[1].replace(/\s/g, ""), "base64").toString("utf8"))
    .join("\n");
  return `${qp}\n${b64}`;
}

/** The path and query of the newest link `pattern` matches in mail to `to` (waits up to 10 s). */
export async function mailedLink(to, pattern) {
  const dir = process.env.HERALD_SERVER_DATA_DIR;
  check(dir, "HERALD_SERVER_DATA_DIR is not set; run through .ci/with-server");
  const outbox = join(dir, "outbox");
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const names = (await readdir(outbox).catch(() => [])).filter((n) => n.endsWith(".eml")).sort();
    for (const name of names.reverse()) {
      const mail = decoded(await readFile(join(outbox, name), "utf8"));
      if (!new RegExp(`^To: .*${to.replace(/[.+]/g, "\\$&")}`, "mi").test(mail)) continue;
      const link = mail.match(pattern)?.[0];
      if (link) return link;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no mail to ${to} with a link like ${pattern}`);
}
