// node check_experts.mjs URL OUT_DIR
//
// The expert-load panel of the dashboard of a mixture-of-experts server: after a few
// completions, once the page has rendered the idle server twice, its rows (one per MoE layer:
// routed tokens, hottest expert, its load relative to an even spread, idle experts) must equal
// what GET /v1/moe/experts says at that moment, and the page must talk to no other host and log
// no error. Writes OUT_DIR/dashboard-experts.png; prints one JSON line {"ok": ..., "failures": [...]}.
import path from 'node:path';
import { checker, withPage } from './browser.mjs';

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error('usage: node check_experts.mjs URL OUT_DIR');
  process.exit(2);
}
const origin = new URL(url).origin;
const { failures, check, report } = checker();
const result = {};

try {
  for (let i = 0; i < 3; i++) {
    const res = await fetch(origin + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time ' + i, max_tokens: 8, temperature: 0 }),
    });
    check(res.ok, 'completion ' + i + ': HTTP ' + res.status);
    await res.text();
  }
  await withPage(origin, false, async (page, seen) => {
    await page.goto(origin + '/dashboard', { waitUntil: 'load' });
    await page.waitForFunction(() => Number(document.body.dataset.updates) >= 2, { timeout: 30000 });
    const load = await (await fetch(origin + '/v1/moe/experts')).json();
    const dom = await page.evaluate(() => ({
      hidden: document.getElementById('experts-row').hidden,
      layers: Number(document.body.dataset.moeLayers),
      rows: [...document.querySelectorAll('#experts tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)),
    }));
    const want = load.layers.map((l) => {
      const routed = l.tokens.reduce((a, b) => a + b, 0);
      const top = Math.max(...l.tokens);
      return [String(l.layer), String(routed), String(l.tokens.indexOf(top)),
        (top / (routed / load.experts)).toFixed(2) + '×', String(l.tokens.filter((n) => n === 0).length)];
    });
    check(!dom.hidden, 'the expert panel is hidden on a mixture-of-experts server');
    check(dom.layers === load.layers.length, 'layers on the page ' + dom.layers + ' vs ' + load.layers.length);
    check(JSON.stringify(dom.rows) === JSON.stringify(want), 'rows ' + JSON.stringify(dom.rows) + ' vs ' + JSON.stringify(want));
    check(load.layers.every((l) => l.tokens.reduce((a, b) => a + b, 0) > 0), 'a layer routed nothing: ' + JSON.stringify(load));
    await page.screenshot({ path: path.join(outDir, 'dashboard-experts.png'), fullPage: true });
    check(seen.foreign.length === 0, 'requests to other hosts: ' + seen.foreign.join(', '));
    check(seen.consoleErrors.length === 0, 'console errors: ' + seen.consoleErrors.join(' | '));
    Object.assign(result, { layers: dom.layers, rows: dom.rows });
  });
} catch (e) {
  failures.push('exception: ' + (e && e.stack ? e.stack : e));
}
report(result);
