// Shared by the browser tests: checks, the accessibility scan and the width check.
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
