// dashboard-s3.cjs — the dashboard's pages on an S3-backed kiln serve, in
// headless Chromium, for tests/e2e/t1102-dashboard-s3.sh; a TAP line per check.
// Env: URL, TOKEN (team-a), EXPECT (team-a/app as /kiln/v1/repos gave it),
// PROV_BUILDER and PROV_DOCKERFILE (team-a/signed:v1's), ART, PUPPETEER, CHROMIUM.
'use strict';
const puppeteer = require(process.env.PUPPETEER);
const E = process.env;
const ok = (cond, name, why) => console.log((cond ? 'ok - ' : 'not ok - ') + name + (!cond && why !== undefined ? ' (' + String(why).slice(0, 300) + ')' : ''));
const want = JSON.parse(E.EXPECT);

(async () => {
  const browser = await puppeteer.launch({ executablePath: E.CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 700 });
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));
  // every failed request but the favicon and the whoami before login (401)
  let loggedIn = false;
  page.on('response', (r) => { if (r.status() >= 400 && !r.url().endsWith('/favicon.ico') && (loggedIn || r.status() !== 401))
    problems.push(r.status() + ' ' + r.url()); });
  await page.goto(E.URL + '/ui/', { waitUntil: 'networkidle0' });
  await page.focus('#token');
  await page.keyboard.type(E.TOKEN);
  loggedIn = true;
  await page.keyboard.press('Enter');
  await page.waitForSelector('table.tags tr[data-tag]', { timeout: 15000 }).catch(() => {});
  const rows = await page.$$eval('h2[data-repo="team-a/app"] + p + table tr[data-tag]', (trs) =>
    trs.map((tr) => ({ tag: tr.dataset.tag, digest: tr.children[1].title, size: tr.children[3].textContent, fresh: tr.children[4].textContent })));
  ok(rows.map((r) => r.tag).join(',') === want.tags.map((t) => t.tag).join(','), 'S3: the templates page lists the tags, newest first', JSON.stringify(rows));
  ok(rows.length === 3 && rows.every((r, i) => r.digest === want.tags[i].digest && /^\d+(\.\d)? (B|KiB|MiB)$/.test(r.size) && r.fresh !== ''),
     '...each with its digest, size and new bytes', JSON.stringify(rows));
  // a signed version's provenance, read over /v2/ from the bucket
  const srow = 'h2[data-repo="team-a/signed"] + p + table tr[data-tag="v1"]';
  await page.focus(srow + ' button').catch(() => {});
  await page.keyboard.press('Enter');
  await page.waitForSelector(srow + ' + tr.provenance dl.provenance', { timeout: 10000 }).catch(() => {});
  const prov = await page.$$eval(srow + ' + tr.provenance dd', (dds) => Object.fromEntries(dds.map((d) => [d.dataset.key, d.textContent]))).catch(() => ({}));
  ok(prov.builder === E.PROV_BUILDER && prov.Dockerfile === E.PROV_DOCKERFILE && prov['base images'] === 'none (FROM scratch)',
     "S3: a signed version's provenance: builder, Dockerfile digest, no base", JSON.stringify(prov));
  await page.screenshot({ path: `${E.ART}/templates-s3.png` });
  await page.goto(E.URL + '/ui/#/history/team-a%2Fapp/latest', { waitUntil: 'networkidle0' });
  await page.waitForSelector('table.history tbody tr', { timeout: 10000 }).catch(() => {});
  const hist = await page.$$eval('table.history tbody tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  ok(hist.length === 2 && Number(hist[0][3]) >= 1 && Number(hist[0][5]) >= 1 && hist[1][5] === '—' && /^b-/.test(hist[0][2]),
     'S3: the history page: latest moved v1 → v2, new and shared chunks, the build that made it', JSON.stringify(hist));
  await page.screenshot({ path: `${E.ART}/history-s3.png` });
  await page.goto(E.URL + '/ui/#/usage', { waitUntil: 'networkidle0' });
  await page.waitForSelector('section[data-team="team-a"] tr[data-quota="bytes"]', { timeout: 10000 }).catch(() => {});
  const used = await page.$eval('section[data-team="team-a"] tr[data-quota="bytes"] td.used', (td) => td.textContent).catch(() => '');
  const mins = await page.$eval('section[data-team="team-a"] tr[data-quota="build_minutes"] td.limit', (td) => td.textContent).catch(() => '');
  ok(/^\d+(\.\d)? (B|KiB|MiB)$/.test(used) && mins === '600 min', 'S3: the usage page: stored bytes, build minutes against 600', `${used} | ${mins}`);
  await page.screenshot({ path: `${E.ART}/usage-s3.png` });
  ok(problems.length === 0, 'S3: no script error or failed request on any page', problems.join(' | '));
  await browser.close();
})().catch((e) => console.log('not ok - the browser run (' + String(e.stack || e).slice(0, 400) + ')'));
