// node check_router_dashboard.mjs URL OUT_DIR [API_KEY]
//
// Opens URL/dashboard of a `pagoda router` in headless Debian Chromium (puppeteer-core drives
// /usr/bin/chromium), sends load through the router (6 concurrent streaming completions over 4
// shared prefixes, until the page has rendered the load 4 times; at most 3000 requests or 120 s),
// and checks:
//   - the page updates live (at least 3 renders during the load, the request counter moves, a
//     request in flight is shown, one row per worker, a down worker shown down);
//   - once the load is over and the page has rendered the idle router, every number it shows
//     (cards and every worker's row) equals GET /router/stats and GET /metrics fetched at that
//     moment, TTFT's p50 included (computed from /metrics' buckets as PromQL's
//     histogram_quantile does);
//   - the shared prefixes hit the workers' caches (the router placed them where they were);
//   - with an API key, the page asks for it and sends it as a header (never in a URL);
//   - no request goes to any other host.
// Writes OUT_DIR/router-dashboard-live.png and OUT_DIR/router-dashboard-idle.png. Prints one
// JSON line {"ok": true|false, "failures": [...], ...}; exits 1 on a failure.
import path from 'node:path';
import { checker, parseMetrics, sleep, withPage } from './browser.mjs';

const [url, outDir, apiKey] = process.argv.slice(2);
if (!url || !outDir) {
  console.error('usage: node check_router_dashboard.mjs URL OUT_DIR [API_KEY]');
  process.exit(2);
}
const origin = new URL(url).origin;
const { failures, check, report } = checker();
const auth = apiKey ? { Authorization: 'Bearer ' + apiKey } : {};

async function getJson(p) {
  const res = await fetch(origin + p, { headers: auth });
  if (!res.ok) throw new Error(p + ': HTTP ' + res.status);
  return res.json();
}

// PromQL's histogram_quantile over name_bucket{le=...} samples.
function quantile(m, name, q) {
  const buckets = Object.keys(m).filter((k) => k.startsWith(name + '_bucket{le="'))
    .map((k) => ({ le: k.includes('+Inf') ? Infinity : Number(k.slice(k.indexOf('"') + 1, k.lastIndexOf('"'))), c: m[k] }))
    .sort((a, b) => a.le - b.le);
  const total = buckets.length ? buckets[buckets.length - 1].c : 0;
  if (total === 0) return 0;
  const rank = q * total;
  let before = 0;
  for (let i = 0; i < buckets.length; i++) {
    if (buckets[i].le === Infinity) return buckets[i - 1].le;
    if (buckets[i].c >= rank) {
      const start = i === 0 ? 0 : buckets[i - 1].le;
      return start + (buckets[i].le - start) * ((rank - before) / (buckets[i].c - before));
    }
    before = buckets[i].c;
  }
  return buckets[buckets.length - 1].le;
}

const sumOf = (m, name) => Object.keys(m).filter((k) => k.startsWith(name + '{')).reduce((a, k) => a + m[k], 0);
const label = (w) => '{worker="' + w + '"}';

// Streaming completions through the router, `concurrency` at a time, until enough() or `total`.
async function load(total, concurrency, enough) {
  const prefixes = [
    'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. ',
    'Tom had a big red ball. He liked to kick it high into the sky and run after it all day long. ',
    'The sun was warm and bright. A little bird sang in the tall green tree next to the old house. ',
    'Mom made a cake for the party. Sue and Ben helped her mix the flour and the eggs in a big bowl. '];
  let next = 0, done = 0, failed = 0;
  async function worker() {
    while (next < total && !enough()) {
      const i = next++;
      try {
        const res = await fetch(origin + '/v1/completions', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', ...auth },
          body: JSON.stringify({ prompt: prefixes[i % prefixes.length] + 'Then ' + i, max_tokens: 48, ignore_eos: true,
            temperature: 0.8, seed: i, stream: true, stream_options: { include_usage: true } }),
        });
        if (!res.ok) throw new Error('HTTP ' + res.status);
        await res.text();
        done++;
      } catch (e) {
        failed++;
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { done, failed };
}

const result = { ok: false };
try {
  await withPage(origin, !!apiKey, async (page, seen) => {
    await page.goto(origin + '/dashboard', { waitUntil: 'load' });
    const updates = () => page.evaluate(() => Number(document.body.dataset.updates || 0));
    if (apiKey) {
      await page.waitForSelector('#key-form:not([hidden])', { timeout: 10000 });
      check((await updates()) === 0, 'the page rendered data before it had the key');
      await page.type('#key', apiKey);
      await page.click('#key-form button');
    }
    await page.waitForFunction(() => Number(document.body.dataset.updates) >= 1, { timeout: 30000 });

    // Under load.
    const live = { renders: 0, requests: [], max_in_flight: 0, rows: 0, down: 0 };
    let loading = true, shot = false;
    const loadStart = Date.now();
    const enough = () => (shot && live.renders >= 4) || Date.now() - loadStart > 120000;
    const loadDone = load(3000, 6, enough).then((r) => { loading = false; return r; });
    const startUpdates = await updates();
    while (loading) {
      await sleep(250);
      const v = await page.evaluate(() => ({
        updates: Number(document.body.dataset.updates),
        requests: Number(document.getElementById('v-requests').dataset.value),
        inFlight: Number(document.getElementById('v-in-flight').dataset.value),
        rows: document.querySelectorAll('#workers tbody tr').length,
        down: [...document.querySelectorAll('#workers tbody tr td:nth-child(2)')].filter((td) => td.dataset.value === '0').length,
      }));
      live.renders = v.updates - startUpdates;
      live.requests.push(v.requests);
      live.max_in_flight = Math.max(live.max_in_flight, v.inFlight);
      live.rows = v.rows;
      live.down = v.down;
      if (!shot && v.inFlight >= 2 && live.renders >= 3) {
        await page.screenshot({ path: path.join(outDir, 'router-dashboard-live.png'), fullPage: true });
        shot = true;
      }
    }
    const loadResult = await loadDone;
    if (!shot) await page.screenshot({ path: path.join(outDir, 'router-dashboard-live.png'), fullPage: true });
    check(loadResult.failed === 0, 'load requests failed: ' + loadResult.failed);
    check(live.renders >= 3, 'the page rendered ' + live.renders + ' times during the load (want >= 3)');
    check(new Set(live.requests).size >= 3, 'the request counter did not move on the page: ' + live.requests.join(','));
    check(live.max_in_flight >= 1, 'the page never showed a request in flight');

    // Idle: wait for renders of the settled router, then compare with its API at that moment.
    let stats = null, m = null, problems = [];
    for (let attempt = 0; attempt < 20; attempt++) {
      const before = await updates();
      await page.waitForFunction((n) => Number(document.body.dataset.updates) >= n + 2, { timeout: 30000 }, before);
      stats = await getJson('/router/stats');
      m = parseMetrics(await (await fetch(origin + '/metrics')).text());
      const dom = await page.evaluate(() => {
        const v = {};
        for (const el of document.querySelectorAll('[id^="v-"]')) v[el.id] = { value: el.dataset.value, text: el.textContent };
        v.workers = {};
        for (const tr of document.querySelectorAll('#workers tbody tr')) {
          v.workers[tr.dataset.url] = [...tr.children].map((td) => ({ value: td.dataset.value, text: td.textContent }));
        }
        return v;
      });
      problems = [];
      const same = (id, want, what) => {
        if (Number(dom[id].value) !== want) problems.push(id + ' shows ' + dom[id].value + ', ' + what + ' says ' + want);
      };
      same('v-requests', m['pagoda_router_requests_total'], '/metrics');
      same('v-requests', stats.requests.total, '/router/stats');
      same('v-retries', m['pagoda_router_retries_total'], '/metrics');
      same('v-unroutable', m['pagoda_router_unroutable_requests_total'], '/metrics');
      same('v-broken-streams', m['pagoda_router_broken_streams_total'], '/metrics');
      same('v-in-flight', sumOf(m, 'pagoda_router_in_flight_requests'), '/metrics');
      same('v-workers-up', sumOf(m, 'pagoda_router_worker_up'), '/metrics');
      same('v-workers', Object.keys(m).filter((k) => k.startsWith('pagoda_router_worker_up{')).length, '/metrics');
      same('v-synced', sumOf(m, 'pagoda_router_kv_events_synced'), '/metrics');
      same('v-failed-attempts', sumOf(m, 'pagoda_router_failed_attempts_total'), '/metrics');
      same('v-prompt-tokens', sumOf(m, 'pagoda_router_prompt_tokens_total'), '/metrics');
      same('v-reported-cached', sumOf(m, 'pagoda_router_reported_cached_tokens_total'), '/metrics');
      same('v-predicted-cached', sumOf(m, 'pagoda_router_predicted_cached_tokens_total'), '/metrics');
      same('v-ttft-count', m['pagoda_router_time_to_first_token_seconds_count'], '/metrics');
      same('v-ttft-p50', stats.latency.ttft.p50, '/router/stats');
      same('v-ttft-p99', stats.latency.ttft.p99, '/router/stats');
      const p50 = quantile(m, 'pagoda_router_time_to_first_token_seconds', 0.5);
      if (Math.abs(Number(dom['v-ttft-p50'].value) - p50) > 1e-12 * Math.max(1, p50)) {
        problems.push('TTFT p50 ' + dom['v-ttft-p50'].value + ' vs histogram_quantile(0.5) of /metrics ' + p50);
      }
      if (dom['v-ttft-p50'].text !== (stats.latency.ttft.p50 * 1000).toFixed(1)) problems.push('TTFT text ' + dom['v-ttft-p50'].text);
      const rate = sumOf(m, 'pagoda_router_reported_cached_tokens_total') / sumOf(m, 'pagoda_router_prompt_tokens_total');
      if (dom['v-hit-rate'].text !== (rate * 100).toFixed(1)) problems.push('hit rate ' + dom['v-hit-rate'].text + ' vs ' + rate);
      const columns = { routed: 7, failed: 8, predicted: 9, reported: 10 };
      for (const w of stats.workers) {
        const row = dom.workers[w.url];
        if (!row) { problems.push('no row for ' + w.url); continue; }
        const cellIs = (col, want, what) => {
          if (Number(row[col].value) !== want) problems.push(w.url + ' column ' + col + ' shows ' + row[col].value + ', ' + what + ' says ' + want);
        };
        cellIs(1, m['pagoda_router_worker_up' + label(w.url)], 'worker_up');
        cellIs(2, m['pagoda_router_kv_events_synced' + label(w.url)], 'kv_events_synced');
        cellIs(3, m['pagoda_router_in_flight_requests' + label(w.url)], 'in_flight_requests');
        cellIs(4, m['pagoda_router_active_blocks' + label(w.url)], 'active_blocks');
        cellIs(5, w.pending_prefill_tokens, '/router/stats');
        cellIs(6, m['pagoda_router_indexed_blocks' + label(w.url)], 'indexed_blocks');
        cellIs(columns.routed, m['pagoda_router_routed_requests_total' + label(w.url)], 'routed_requests_total');
        cellIs(columns.failed, m['pagoda_router_failed_attempts_total' + label(w.url)], 'failed_attempts_total');
        cellIs(columns.predicted, m['pagoda_router_predicted_cached_tokens_total' + label(w.url)], 'predicted_cached_tokens_total');
        cellIs(columns.reported, m['pagoda_router_reported_cached_tokens_total' + label(w.url)], 'reported_cached_tokens_total');
        cellIs(11, w.hit_rate, '/router/stats');
        cellIs(12, w.ttft.p50, '/router/stats');
      }
      if (Object.keys(dom.workers).length !== stats.workers.length) problems.push('worker rows ' + Object.keys(dom.workers).length);
      if (problems.length === 0 && stats.requests.in_flight === 0) break;
    }
    failures.push(...problems);
    const up = stats.workers.filter((w) => w.up);
    check(stats.workers.some((w) => !w.up), 'the test gives the router a down worker; none shows down');
    check(up.length >= 2 && up.every((w) => w.routed > 0), 'every up worker should have served requests');
    const rate = stats.tokens.hit_rate;
    check(rate > 0.3, 'shared prefixes should hit the workers\' caches through the router (rate ' + rate + ')');
    check(stats.tokens.predicted_cached > 0, 'the router predicted no cached tokens');
    await page.screenshot({ path: path.join(outDir, 'router-dashboard-idle.png'), fullPage: true });

    check(seen.foreign.length === 0, 'requests to other hosts: ' + seen.foreign.join(', '));
    check(seen.requested.every((u) => !apiKey || !u.includes(apiKey)), 'the API key appeared in a URL');
    check(seen.consoleErrors.length === 0, 'console errors: ' + seen.consoleErrors.join(' | '));
    Object.assign(result, { renders: live.renders, max_in_flight: live.max_in_flight, requests: stats.requests.total,
      retries: stats.requests.retries, hit_rate: rate, page_requests: seen.requested.length });
  });
} catch (e) {
  failures.push('exception: ' + (e && e.stack ? e.stack : e));
}
report(result);
