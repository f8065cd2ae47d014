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
  // usage: the team's sandboxes against its quotas, counted as a create counts them
  const usage = async () => {
    await page.goto(E.URL + '/ui/#/usage', { waitUntil: 'networkidle0' });
    await page.waitForSelector('section[data-team="team"] tr[data-quota="sandboxes"]', { timeout: 10000 }).catch(() => {});
    return page.$$eval('section[data-team="team"] tr[data-quota]', (trs) => Object.fromEntries(trs.map((tr) =>
      [tr.dataset.quota, [...tr.children].map((td) => td.textContent)]))).catch(() => ({}));
  };
  const u1 = await usage();
  ok(u1.sandboxes && u1.sandboxes[1] === '1' && u1.sandboxes[2] === '4' && u1.sandboxes[3] === '25%', 'usage: 1 running sandbox of the quota of 4', JSON.stringify(u1.sandboxes));
  ok(u1.sandbox_memory_mib && u1.sandbox_memory_mib[1] === '128 MiB' && u1.sandbox_memory_mib[2] === '1024 MiB',
     "usage: its template's 128 MiB of the 1024 MiB quota", JSON.stringify(u1.sandbox_memory_mib));
  ok(u1.sandbox_vcpus && /^[1-9]$/.test(u1.sandbox_vcpus[1]) && u1.sandbox_vcpus[2] === 'no limit', 'usage: its vCPUs, no limit set', JSON.stringify(u1.sandbox_vcpus));
  ok(await page.$('section[data-team="other"]') === null, "usage: another team's is not shown");
  await page.screenshot({ path: `${E.ART}/usage-sandboxes.png` });
  await page.goto(E.URL + '/ui/#/sandboxes', { waitUntil: 'networkidle0' });
  await page.waitForSelector(row, { timeout: 15000 }).catch(() => {});
  await page.click(row + ' button.kill');
  const gone = await page.waitForFunction((sel) => document.querySelector(sel) === null && document.querySelector('table.sandboxes'),
    { timeout: 30000 }, row).then(() => true, () => false);
  ok(gone, 'Kill: the sandbox leaves the page');
  await page.screenshot({ path: `${E.ART}/sandboxes-killed.png` });
  const u2 = await usage();
  ok(u2.sandboxes && u2.sandboxes[1] === '0' && u2.sandbox_memory_mib && u2.sandbox_memory_mib[1] === '0 MiB', 'usage after Kill: 0 sandboxes, 0 MiB',
     JSON.stringify(u2));
  ok(problems.length === 0, 'no script error', problems.join(' | '));
  await browser.close();
})().catch((e) => console.log('not ok - the browser run (' + String(e.stack || e).slice(0, 400) + ')'));
