// Driven by scripts/ui-check: the Swagger UI page of a live memfit serve, in headless Chromium.
import { chromium } from "playwright-core";

const base = process.env.UI_URL;
const token = process.env.UI_TOKEN;
const fail = (why) => {
  console.error(`ui-check: FAILED: ${why}`);
  process.exitCode = 1;
};

const context = await chromium.launchPersistentContext(process.env.UI_PROFILE, {
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const calls = [];
  const errors = [];
  page.on("request", (r) => {
    if (r.url().includes("/v1/models/fit/batch")) calls.push({ method: r.method(), url: r.url() });
  });
  page.on("requestfailed", (r) => errors.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
  page.on("console", (m) => m.type() === "error" && errors.push(`console: ${m.text()}`));

  await page.goto(`${base}/`);
  const landed = new URL(page.url()).pathname;
  console.log(`GET / landed on ${landed}`);
  if (landed !== "/v1/ui/") fail(`/ should redirect to /v1/ui/, landed on ${landed}`);

  const servers = await page.evaluate(async () => (await (await fetch("/v1/openapi.json")).json()).servers);
  console.log(`served spec's servers: ${JSON.stringify(servers)}`);

  await page.locator(".auth-wrapper .authorize").click();
  await page.locator(".modal-ux input").first().fill(token);
  await page.locator(".modal-ux .auth-btn-wrapper .authorize").click();
  await page.locator(".modal-ux .btn-done").click();

  const op = page.locator("#operations-Models-fitBatch");
  await op.locator(".opblock-summary").first().click();
  await op.locator(".try-out__btn").click();
  const prefilled = await op.locator("textarea.body-param__text").inputValue();
  console.log(`prefilled body: ${prefilled.replace(/\s+/g, " ")}`);
  await op.locator("button.execute").click();
  const status = (await op.locator(".live-responses-table tbody .response-col_status").first().textContent({ timeout: 30000 })).trim();
  const body = await op.locator(".live-responses-table tbody .response-col_description pre").first().textContent();
  let results = [];
  try {
    results = JSON.parse(body).results ?? [];
  } catch {
    fail(`the response body is not JSON: ${body.slice(0, 300)}`);
  }
  console.log(`Try it out: ${calls.map((c) => `${c.method} ${c.url}`).join(", ")} -> ${status}, ${results.length} result(s)`);
  for (const r of results) {
    console.log(`  ${r.modelId}: verdict ${r.verdict}, ${r.estimate.lowerBoundBytes}..${r.estimate.upperBoundBytes} bytes`);
  }
  if (process.env.UI_SCREENSHOT) await page.screenshot({ path: process.env.UI_SCREENSHOT, fullPage: true });

  if (status !== "200") fail(`Try it out answered ${status}: ${body.slice(0, 300)}`);
  if (results.length === 0) fail("no results");
  if (calls.length !== 1 || new URL(calls[0].url).origin !== new URL(base).origin) {
    fail(`Try it out called ${JSON.stringify(calls)}, not ${base}`);
  }
  if (errors.length) fail(`the page logged errors: ${errors.join("; ")}`);
  if (!process.exitCode) console.log("ui-check: passed");
} finally {
  await context.close();
}
