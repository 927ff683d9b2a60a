// Open one page in headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core,
// installed by scripts/test into tests/node_modules) and print what it shows as one JSON line.
//
//   node tests/artifacts/open_page.mjs URL [WAIT_FOR_SELECTOR [WAIT_FOR_TEXT_PREFIX]]
//
// Prints {status, title, headers, texts: {id: textContent of every element with an id},
// console: [...], failed: [...requests that failed, with why]}. A fresh --user-data-dir per
// run (playwright's persistent context on a new temp dir), removed afterwards.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
// playwright-core@1.65.1, pinned in scripts/test (PLAYWRIGHT_VERSION).
const { chromium } = require("../node_modules/playwright-core");

const [url, selector = "#done", prefix = ""] = process.argv.slice(2);
if (!url) {
  console.error("usage: open_page.mjs URL [SELECTOR [TEXT_PREFIX]]");
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), "aido-chromium-"));
const flags = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium",
    headless: true,
    args: flags,
    timeout: 60_000,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const consoleLines = [];
  const failed = [];
  page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
  page.on("requestfailed", (r) => failed.push({ url: r.url(), why: r.failure()?.errorText ?? "" }));
  const response = await page.goto(url, { waitUntil: "load", timeout: 30_000 });
  // Wait (bounded) until the page says it is done.
  await page
    .waitForFunction(
      ([sel, pre]) => {
        const el = document.querySelector(sel);
        return el && el.textContent.startsWith(pre) && el.textContent !== "pending";
      },
      [selector, prefix],
      { timeout: 15_000 },
    )
    .catch((e) => consoleLines.push(`wait: ${e.message.split("\n")[0]}`));
  const texts = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("[id]")].map((e) => [e.id, e.textContent])),
  );
  const out = {
    status: response ? response.status() : null,
    headers: response ? await response.allHeaders() : {},
    title: await page.title(),
    texts,
    console: consoleLines,
    failed,
  };
  process.stdout.write(JSON.stringify(out) + "\n");
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
