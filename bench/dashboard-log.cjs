// dashboard-log.cjs — for bench/dashboard-log.sh: the dashboard's build page
// follows a build printing 1,000 lines a second while node reads the same log
// stream directly; every 200 ms both counts are sampled (same clock).
'use strict';
const puppeteer = require(process.env.PUPPETEER);
const E = process.env;
(async () => {
  const browser = await puppeteer.launch({ executablePath: E.CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage();
  await page.goto(E.URL + '/ui/', { waitUntil: 'networkidle0' });
  await page.evaluate((t) => sessionStorage.setItem('kiln-token', t), E.TOKEN);
  await page.goto(E.URL + '/ui/#/build/' + E.BUILD, { waitUntil: 'networkidle0' });
  await page.reload({ waitUntil: 'domcontentloaded' });
  let direct = 0, directDone = false;
  (async () => {
    const res = await fetch(`${E.URL}/build/v1/builds/${E.BUILD}/logs?cursor=0&follow=1`, { headers: { Authorization: 'Bearer ' + E.TOKEN } });
    const dec = new TextDecoder(); let buf = '';
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) { const l = buf.slice(0, nl); buf = buf.slice(nl + 1);
        if (!l.trim()) continue; const ev = JSON.parse(l); if (ev.event === 'output') direct += (ev.data.match(/\n/g) || []).length; }
    }
    directDone = true;
  })();
  const t0 = Date.now(), samples = [];
  for (;;) {
    const s = await page.evaluate(() => { const l = document.getElementById('build-log'); const st = document.getElementById('log-state');
      return { text: l ? (l.textContent.match(/^line /gm) || []).length : 0, done: st ? st.dataset.done === '1' : false }; }).catch(() => ({ text: 0, done: false }));
    samples.push({ t: Date.now() - t0, page: s.text, direct });
    if ((s.done && directDone) || Date.now() - t0 > 240000) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const out = samples.filter((s) => s.direct > 0);
  const first = out[0] || { t: 0 }, last = samples[samples.length - 1];
  const full = samples.find((s) => s.direct >= last.direct && s.page >= last.direct) || last;
  const lag = Math.max(0, ...out.map((s) => s.direct - s.page));
  const directEnd = samples.find((s) => s.direct >= last.direct) || last;
  console.log(`lines: page ${last.page}, direct stream ${last.direct}`);
  console.log(`output phase: ${((directEnd.t - first.t) / 1000).toFixed(1)} s, ${(last.direct / Math.max(0.001, (directEnd.t - first.t) / 1000)).toFixed(0)} lines/s read directly`);
  console.log(`page behind the direct stream: at most ${lag} lines over ${out.length} samples; every line on the page ${full.t - directEnd.t} ms after the direct reader had them all`);
  await browser.close();
})().catch((e) => { console.log('error: ' + e); process.exit(1); });
