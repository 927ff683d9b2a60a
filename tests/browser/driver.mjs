// A headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; no browser is
// downloaded) that tests/e2e/test_mission.py steers: one JSON command per stdin line, one JSON
// answer per stdout line ({"ok": true, ...} or {"ok": false, "error": ...}). The assertions are
// the test's; this only does what a person at the page would and reports what it shows.
//
//   {"op": "open", "url": U}                        go to U, wait for the page to load
//   {"op": "wait", "selector": S, "count": N, "text": T, "timeout_ms": M}
//                                                   until N elements match S (and one has T)
//   {"op": "texts", "selector": S}                  the text of every match
//   {"op": "attrs", "selector": S, "name": A}       attribute A of every match
//   {"op": "images", "selector": S}                 naturalWidth/Height of every matching img
//   {"op": "click", "selector": S} | {"op": "fill", "selector": S, "value": V}
//   {"op": "screenshot", "path": P, "selector": S?} a PNG of the page (or one element)
//   {"op": "close"}
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const profile = mkdtempSync(join(tmpdir(), "aido-mc-chromium-"));
// The flags this closed network needs: no network services of the browser's own.
const args = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  args,
  viewport: { width: 1360, height: 900 },
});
const page = context.pages()[0] || (await context.newPage());
const console_ = [];
page.on("console", (m) => console_.push(`${m.type()}: ${m.text()}`));
page.on("pageerror", (e) => console_.push(`pageerror: ${e.message}`));

async function run(cmd) {
  const timeout = cmd.timeout_ms ?? 10000;
  switch (cmd.op) {
    case "open": {
      const r = await page.goto(cmd.url, { waitUntil: "load", timeout });
      return { status: r ? r.status() : null, title: await page.title() };
    }
    case "wait": {
      const count = cmd.count ?? 1;
      const started = Date.now();
      await page.waitForFunction(
        ({ selector, count, text }) => {
          const all = [...document.querySelectorAll(selector)];
          if (all.length < count) return false;
          return text ? all.some((e) => e.textContent.includes(text)) : true;
        },
        { selector: cmd.selector, count, text: cmd.text || null },
        { timeout, polling: 50 },
      );
      return { waited_ms: Date.now() - started };
    }
    case "texts":
      return { texts: await page.$$eval(cmd.selector, (all) => all.map((e) => e.textContent)) };
    case "attrs":
      return { values: await page.$$eval(cmd.selector, (all, name) => all.map((e) => e.getAttribute(name)), cmd.name) };
    case "images":
      return {
        images: await page.$$eval(cmd.selector, (all) => all.map((i) => ({ w: i.naturalWidth, h: i.naturalHeight, complete: i.complete }))),
      };
    case "click":
      await page.click(cmd.selector, { timeout });
      return {};
    case "fill":
      await page.fill(cmd.selector, cmd.value, { timeout });
      return {};
    case "screenshot":
      if (cmd.selector) await page.locator(cmd.selector).first().screenshot({ path: cmd.path, timeout });
      else await page.screenshot({ path: cmd.path, fullPage: !!cmd.full, timeout });
      return { path: cmd.path };
    case "close":
      return {};
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
process.stdout.write(JSON.stringify({ ok: true, ready: true, browser: context.browser()?.version() ?? null }) + "\n");
for await (const line of lines) {
  if (!line.trim()) continue;
  let cmd;
  try { cmd = JSON.parse(line); } catch (e) { process.stdout.write(JSON.stringify({ ok: false, error: `not JSON: ${e.message}` }) + "\n"); continue; }
  try {
    const out = await run(cmd);
    process.stdout.write(JSON.stringify({ ok: true, ...out }) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(e.message || e), console: console_.slice(-20) }) + "\n");
  }
  if (cmd.op === "close") break;
}
await context.close();
rmSync(profile, { recursive: true, force: true });
