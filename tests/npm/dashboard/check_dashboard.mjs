// node check_dashboard.mjs URL OUT_DIR [--tiers=host,disk] [API_KEY]
//
// Opens URL/dashboard in headless Debian Chromium (puppeteer-core drives /usr/bin/chromium),
// puts the server under load (8 concurrent streaming completions that share a prefix, until the
// page has rendered the load 4 times; at most 5000 requests or 120 s), and checks:
//   - the page updates live (at least 3 renders during the load, the step counter grows, the
//     requests table shows running requests, the block map has in-use blocks);
//   - once the load is over and the page has rendered the idle server, every number it shows
//     equals /v1/kv/stats and /metrics fetched at that moment;
//   - with an API key, the page asks for it and sends it as a header (never in a URL);
//   - no request goes to any other host.
// Writes OUT_DIR/dashboard-live.png (under load) and OUT_DIR/dashboard-idle.png. Prints one JSON
// line {"ok": true|false, "failures": [...], ...}; exits 1 on a failure.
import path from 'node:path';
import { checker, parseMetrics, sleep, withPage } from './browser.mjs';

// Optional after OUT_DIR: --tiers=host,disk (the server has these tiers below the pool: the
// tier rows must name them and show blocks written), and the API key.
const args = process.argv.slice(2);
const [url, outDir] = args;
const tiersArg = args.slice(2).find((a) => a.startsWith('--tiers='));
const expectTiers = tiersArg ? tiersArg.slice('--tiers='.length).split(',').filter((t) => t) : [];
const apiKey = args.slice(2).find((a) => !a.startsWith('--'));
if (!url || !outDir) {
  console.error('usage: node check_dashboard.mjs URL OUT_DIR [API_KEY]');
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

// The load: `total` streaming completions, `concurrency` at a time; prompts share a long system
// prefix so the prefix cache hits, and each has its own suffix.
async function load(total, concurrency, enough) {
  const system = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. ';
  const suffixes = ['One day, she saw a big red ball.', 'Tom had a little dog.', 'The sun was warm and bright.',
    'A bird sang in the tree.', 'Mom made a cake.', 'They went to the beach.'];
  let next = 0, done = 0, failed = 0;
  async function worker() {
    while (next < total && !enough(done)) {
      const i = next++;
      try {
        const res = await fetch(origin + '/v1/completions', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', ...auth },
          body: JSON.stringify({ prompt: system + suffixes[i % suffixes.length] + ' ' + i, max_tokens: 160,
            ignore_eos: true, temperature: 0.8, seed: i, stream: true }),
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
    const { requested, foreign, consoleErrors } = seen;
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
    const live = { renders: 0, steps: [], max_rows: 0, max_in_use: 0, states: new Set() };
    let loading = true;
    let shot = false;
    // Requests keep coming until the page has rendered the load 4 times: a browser starved of CPU
    // (other tests beside this one) renders slowly while the tiny model answers fast, so the count
    // is bounded only by 5000 requests and 120 s. And at least three waves of requests finish:
    // the first wave starts before any prefix is cached and all of it misses, so with a server
    // slowed by other tests (one wave and a bit: hit rate 0.25) the hit-rate check below would
    // judge the timing, not the cache.
    const loadStart = Date.now();
    const enough = (done) => (shot && live.renders >= 4 && done >= 3 * 8) || Date.now() - loadStart > 120000;
    const loadDone = load(5000, 8, enough).then((r) => { loading = false; return r; });
    const startUpdates = await updates();
    while (loading) {
      await sleep(250);
      const seen = await page.evaluate(() => ({
        updates: Number(document.body.dataset.updates),
        steps: Number(document.getElementById('v-steps').dataset.value),
        rows: document.querySelectorAll('#requests tbody tr').length,
        inUse: Number(document.getElementById('v-in-use').dataset.value),
        states: [...document.querySelectorAll('#requests tbody tr td:nth-child(2)')].map((td) => td.textContent),
      }));
      live.renders = seen.updates - startUpdates;
      live.steps.push(seen.steps);
      live.max_rows = Math.max(live.max_rows, seen.rows);
      live.max_in_use = Math.max(live.max_in_use, seen.inUse);
      seen.states.forEach((s) => live.states.add(s));
      if (!shot && seen.rows >= 4 && live.renders >= 3) {
        await page.screenshot({ path: path.join(outDir, 'dashboard-live.png'), fullPage: true });
        shot = true;
      }
    }
    const loadResult = await loadDone;
    if (!shot) await page.screenshot({ path: path.join(outDir, 'dashboard-live.png'), fullPage: true });
    check(loadResult.failed === 0, 'load requests failed: ' + loadResult.failed);
    check(live.renders >= 3, 'the page rendered ' + live.renders + ' times during the load (want >= 3)');
    check(new Set(live.steps).size >= 3, 'the step counter did not move on the page: ' + live.steps.join(','));
    check(live.max_rows >= 1, 'the requests table never showed a running request');
    check(live.max_in_use >= 1, 'the page never showed a block in use');
    check(live.states.has('decoding'), 'no request was shown decoding: ' + [...live.states].join(','));

    // Idle: wait for a render of the settled server, then compare with the API at that moment.
    let stats = null, metrics = null, dom = null;
    for (let attempt = 0; attempt < 20; attempt++) {
      const before = await updates();
      await page.waitForFunction((n) => Number(document.body.dataset.updates) >= n + 2, { timeout: 30000 }, before);
      stats = await getJson('/v1/kv/stats');
      metrics = parseMetrics(await (await fetch(origin + '/metrics')).text());
      dom = await page.evaluate(() => {
        const v = {};
        for (const el of document.querySelectorAll('[id^="v-"]')) v[el.id] = { value: el.dataset.value, text: el.textContent };
        v.rows = document.querySelectorAll('#requests tbody tr').length;
        v.prefixRows = [...document.querySelectorAll('#prefixes tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent));
        v.tierCounts = [...document.querySelectorAll('#tier-counts .tier-count')].map((el) =>
          [el.dataset.tier, Number(el.dataset.value)]);
        v.tierRows = [...document.querySelectorAll('#tiers tbody tr')].map((tr) =>
          [tr.dataset.tier, ...[...tr.children].slice(3).map((td) => Number(td.dataset.value))]);
        v.tierMemory = [...document.querySelectorAll('#tiers tbody tr')].map((tr) => tr.children[1].textContent);
        v.saysGpu = /\bGPU\b/.test(document.body.innerText);
        return v;
      });
      if (Number(dom['v-steps'].value) === stats.steps && stats.requests.running === 0 && stats.requests.waiting === 0) break;
    }
    const num = (id) => Number(dom[id].value);
    const same = (id, want, what) => check(num(id) === want, id + ' shows ' + dom[id].value + ', ' + what + ' says ' + want);
    same('v-steps', stats.steps, '/v1/kv/stats steps');
    same('v-steps', metrics['pagoda_engine_steps_total'], '/metrics');
    same('v-in-use', stats.pool.in_use, 'stats');
    same('v-in-use', metrics['pagoda_kv_blocks{state="in_use"}'], '/metrics');
    same('v-cached', stats.pool.cached, 'stats');
    same('v-cached', metrics['pagoda_kv_blocks{state="cached"}'], '/metrics');
    same('v-free', stats.pool.free, 'stats');
    same('v-free', metrics['pagoda_kv_blocks{state="free"}'], '/metrics');
    same('v-num-blocks', metrics['pagoda_kv_blocks_capacity'], '/metrics');
    same('v-hit-tokens', stats.prefix_cache.hit_tokens, 'stats');
    same('v-hit-tokens', metrics['pagoda_prefix_cache_hit_tokens_total'], '/metrics');
    same('v-queried-tokens', metrics['pagoda_prefix_cache_queried_tokens_total'], '/metrics');
    same('v-running', metrics['pagoda_requests_running'], '/metrics');
    same('v-waiting', metrics['pagoda_requests_waiting'], '/metrics');
    same('v-gen-tokens', metrics['pagoda_generation_tokens_total'], '/metrics');
    same('v-ttft-count', metrics['pagoda_time_to_first_token_seconds_count'], '/metrics');
    same('v-ttft-p50', stats.latency.ttft.p50, 'stats');
    same('v-ttft-p99', stats.latency.ttft.p99, 'stats');
    same('v-itl-p50', stats.latency.inter_token.p50, 'stats');
    same('v-evictions', metrics['pagoda_kv_evicted_blocks_total'], '/metrics');
    same('v-preemptions', metrics['pagoda_preemptions_total'], '/metrics');
    same('v-usage', metrics['pagoda_kv_usage_ratio'], '/metrics');
    const rate = metrics['pagoda_prefix_cache_hit_tokens_total'] / metrics['pagoda_prefix_cache_queried_tokens_total'];
    check(dom['v-hit-rate'].text === (rate * 100).toFixed(1), 'hit rate text ' + dom['v-hit-rate'].text + ' vs ' + (rate * 100).toFixed(1));
    check(rate > 0.3, 'the shared-prefix load should hit the prefix cache (rate ' + rate + ')');
    check(dom['v-ttft-p50'].text === (stats.latency.ttft.p50 * 1000).toFixed(1), 'TTFT text ' + dom['v-ttft-p50'].text);
    check(dom.rows === 0, 'idle server, but the requests table has ' + dom.rows + ' rows');
    check(dom.prefixRows.length === stats.top_prefixes.length && dom.prefixRows.length > 0, 'prefix table rows ' + dom.prefixRows.length);
    if (dom.prefixRows.length > 0) {
      check(Number(dom.prefixRows[0][0]) === stats.top_prefixes[0].tokens, 'largest prefix tokens ' + dom.prefixRows[0][0]);
      check(dom.prefixRows[0][4].startsWith('Once upon a time'), 'prefix preview ' + dom.prefixRows[0][4]);
    }
    // The memory each tier lives in, named as what is there: no "GPU" on a CPU engine's page.
    check(dom.tierMemory[0] === 'host DRAM', 'the pool row names its memory ' + JSON.stringify(dom.tierMemory));
    check(JSON.stringify(dom.tierMemory) === JSON.stringify(stats.tiers.map((t) => t.memory)),
      'tier memory ' + JSON.stringify(dom.tierMemory) + ' vs ' + JSON.stringify(stats.tiers));
    check(!dom.saysGpu, 'the page names a GPU this engine does not have');
    // The tiers table: one row per /v1/kv/stats tier, in order, with its numbers.
    check(JSON.stringify(dom.tierRows) === JSON.stringify(stats.tiers.map((t) =>
      [t.tier, t.used_blocks, t.capacity_blocks, t.hit_blocks, t.evictions, t.bytes_read || 0, t.bytes_written || 0,
        t.corrupt_records || 0])),
    'tier rows ' + JSON.stringify(dom.tierRows) + ' vs ' + JSON.stringify(stats.tiers));
    // The counts by tier under the block map, and the loading count.
    check(JSON.stringify(dom.tierCounts) === JSON.stringify(stats.tiers.map((t) => [t.tier, t.used_blocks])),
      'tier counts ' + JSON.stringify(dom.tierCounts) + ' vs ' + JSON.stringify(stats.tiers));
    same('v-loading', stats.pool.loading, 'stats');
    if (expectTiers.length > 0) {
      check(JSON.stringify(stats.tiers.map((t) => t.tier)) === JSON.stringify(['pool', ...expectTiers]),
        'tiers ' + JSON.stringify(stats.tiers.map((t) => t.tier)) + ', want pool + ' + expectTiers.join(','));
      check(stats.tiers.slice(1).every((t) => t.used_blocks > 0 && t.bytes_written > 0),
        'every tier below the pool holds blocks after the load: ' + JSON.stringify(stats.tiers.slice(1)));
    }
    check(dom.tierRows.length >= 1 && dom.tierRows[0][0] === 'pool' &&
      dom.tierRows[0][1] === stats.pool.in_use + stats.pool.cached, 'the pool row: ' + JSON.stringify(dom.tierRows[0]));
    check(stats.pool.block_map === undefined || stats.pool.block_map.length === stats.pool.num_blocks, 'block map length');
    await page.screenshot({ path: path.join(outDir, 'dashboard-idle.png'), fullPage: true });

    check(foreign.length === 0, 'requests to other hosts: ' + foreign.join(', '));
    check(requested.every((u) => !apiKey || !u.includes(apiKey)), 'the API key appeared in a URL');
    check(consoleErrors.length === 0, 'console errors: ' + consoleErrors.join(' | '));
    Object.assign(result, { renders: live.renders, max_rows: live.max_rows, states: [...live.states], requests: requested.length,
      hit_rate: rate, steps: stats.steps });
  });
} catch (e) {
  failures.push('exception: ' + (e && e.stack ? e.stack : e));
}
report(result);
