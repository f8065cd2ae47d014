// dashboard-sandboxes.cjs — the dashboard's sandboxes page in headless Chromium
// for tests/e2e/t1101-dashboard-sandboxes.sh; a TAP line per check.
// Env: URL, TOKEN, SANDBOX (the team's), OTHER_SANDBOX, ART, PUPPETEER, CHROMIUM.
'use strict';
const puppeteer = require(process.env.PUPPETEER);
const E = process.env;
const ok = (cond, name, why) => console.log((cond ? 'ok - ' : 'not ok - ') + name + (!cond && why !== undefined ? ' (' + String(why).slice(0, 300) + ')' : ''));
const secs = (s) => { let t = 0; for (const [, n, u] of s.matchAll(/(\d+) (h|min|s)/g)) t += Number(n) * (u === 'h' ? 3600 : u === 'min' ? 60 : 1); return t; };

(async () => {
  const browser = await puppeteer.launch({ executablePath: E.CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 700 });
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));
  await page.goto(E.URL + '/ui/#/sandboxes', { waitUntil: 'networkidle0' });
  await page.focus('#token');
  await page.keyboard.type(E.TOKEN);
  await page.keyboard.press('Enter');
  const row = `tr[data-sandbox="${E.SANDBOX}"]`;
  await page.waitForSelector(row, { timeout: 15000 }).catch(() => {});
  const cells = await page.$eval(row, (tr) => [...tr.children].map((t) => t.textContent)).catch(() => null);
  ok(cells && cells[1] === 'sbx:1' && cells[2] === 'running' && cells[5] === '128 MiB' && /\d+ s|min/.test(cells[3]),
     "the team's sandbox: template, state, age, memory", JSON.stringify(cells));
  const left0 = cells ? secs(cells[4]) : 0;
  ok(left0 > 400 && left0 <= 600, 'its time left', cells && cells[4]);
  ok(await page.$(`tr[data-sandbox="${E.OTHER_SANDBOX}"]`) === null, "another team's sandbox is not listed");
  await page.screenshot({ path: `${E.ART}/sandboxes.png` });
  // +5 min, reached with the keyboard
  await page.focus(row + ' button.extend');
  await page.keyboard.press('Enter');
  await page.waitForFunction((sel, l0) => { const td = document.querySelector(sel + ' td:nth-child(5)'); if (!td) return false;
    let t = 0; for (const [, n, u] of td.textContent.matchAll(/(\d+) (h|min|s)/g)) t += Number(n) * (u === 'h' ? 3600 : u === 'min' ? 60 : 1);
    return t > l0 + 200; }, { timeout: 15000 }, row, left0).catch(() => {});
  const left1 = secs(await page.$eval(row + ' td:nth-child(5)', (t) => t.textContent).catch(() => ''));
  ok(left1 > left0 + 200, '+5 min extends its time left', `${left0} → ${left1}`);
  await page.click(row + ' button.kill');
  const gone = await page.waitForFunction((sel) => document.querySelector(sel) === null && document.querySelector('table.sandboxes'),
    { timeout: 30000 }, row).then(() => true, () => false);
  ok(gone, 'Kill: the sandbox leaves the page');
  await page.screenshot({ path: `${E.ART}/sandboxes-killed.png` });
  ok(problems.length === 0, 'no script error', problems.join(' | '));
  await browser.close();
})().catch((e) => console.log('not ok - the browser run (' + String(e.stack || e).slice(0, 400) + ')'));
