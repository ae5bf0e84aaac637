// Pagoda's KV dashboard: polls GET /v1/kv/stats once a second and draws it. Plain JavaScript,
// no dependencies, no other origin (the server's Content-Security-Policy forbids one). The API
// key, when the server wants one, is typed into the page, kept in sessionStorage and sent as an
// Authorization header: never in a URL.
'use strict';

(function () {
  const kPollMs = 1000;
  const kHistory = 120;            // points per chart
  const history = [];              // {hitRate, hitTokensPerS, ttftMs, itlMs}
  let previous = null;             // the last snapshot, for per-interval rates
  let updates = 0;

  const $ = (id) => document.getElementById(id);
  const key = () => sessionStorage.getItem('pagoda-api-key') || '';

  function setValue(id, value, text) {
    const el = $(id);
    if (!el) return;
    el.dataset.value = String(value);
    el.textContent = text !== undefined ? text : String(value);
  }
  const ms = (s) => (s * 1000).toFixed(1);
  const pct = (x) => (x * 100).toFixed(1);

  function age(s) {
    if (s === null || s === undefined || s < 0) return 'long ago';
    if (s < 1) return 'now';
    if (s < 120) return Math.round(s) + ' s ago';
    if (s < 7200) return Math.round(s / 60) + ' min ago';
    return Math.round(s / 3600) + ' h ago';
  }

  // A cleared 2-D context on canvas `id` sized to its CSS box at the device's pixel ratio, and
  // that box's width and height (fallbacks before layout).
  function canvasContext(id, fallbackWidth, fallbackHeight) {
    const canvas = $(id);
    const ctx = canvas.getContext('2d');
    const width = canvas.clientWidth || fallbackWidth;
    const height = canvas.clientHeight || fallbackHeight;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * dpr)) canvas.width = Math.round(width * dpr);
    if (canvas.height !== Math.round(height * dpr)) canvas.height = Math.round(height * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    return { ctx, width, height };
  }

  function drawBlockMap(map) {
    const { ctx, width, height } = canvasContext('block-map', 640, 160);
    const n = map.length;
    if (n === 0) return;
    // The largest square cell that fits n cells into width x height.
    let cell = Math.floor(Math.sqrt((width * height) / n));
    while (cell > 1 && Math.floor(width / cell) * Math.floor(height / cell) < n) cell--;
    const cols = Math.max(1, Math.floor(width / cell));
    const style = getComputedStyle(document.documentElement);
    const colour = {
      f: style.getPropertyValue('--free'), u: style.getPropertyValue('--in-use'),
      c: style.getPropertyValue('--cached'), p: style.getPropertyValue('--pinned'),
      l: style.getPropertyValue('--loading'),
    };
    const gap = cell >= 4 ? 1 : 0;
    for (let i = 0; i < n; i++) {
      ctx.fillStyle = colour[map[i]] || colour.f;
      ctx.fillRect((i % cols) * cell, Math.floor(i / cols) * cell, cell - gap, cell - gap);
    }
  }

  // Expert load (GET /v1/moe/experts): one row per MoE layer, one cell per expert, shaded by its
  // tokens relative to the layer's busiest expert; the table names each layer's hottest expert,
  // its load relative to an even spread (1.00 = routed / experts) and the experts never chosen.
  function renderExperts(load) {
    $('experts-row').hidden = false;
    $('experts-desc').textContent = load.experts + ' experts, ' + load.experts_per_token + ' per token, ' +
      load.layers.length + ' layers';
    const { ctx, width, height } = canvasContext('expert-map', 640, 120);
    const rows = load.layers.length, cols = load.experts;
    const cw = width / cols, ch = height / Math.max(1, rows);
    const body = $('experts').tBodies[0];
    body.replaceChildren();
    load.layers.forEach((layer, r) => {
      const routed = layer.tokens.reduce((a, b) => a + b, 0);
      const top = Math.max(...layer.tokens);
      layer.tokens.forEach((n, e) => {
        ctx.fillStyle = 'rgba(37, 99, 235, ' + (top > 0 ? 0.08 + 0.92 * n / top : 0.08).toFixed(3) + ')';
        ctx.fillRect(e * cw, r * ch, Math.max(1, cw - (cw >= 4 ? 1 : 0)), Math.max(1, ch - (ch >= 4 ? 1 : 0)));
      });
      const tr = document.createElement('tr');
      tr.dataset.layer = layer.layer;
      cell(tr, layer.layer);
      cell(tr, routed);
      cell(tr, routed > 0 ? layer.tokens.indexOf(top) : '—');
      cell(tr, routed > 0 ? (top / (routed / cols)).toFixed(2) + '×' : '—');
      cell(tr, layer.tokens.filter((n) => n === 0).length);
      body.appendChild(tr);
    });
    document.body.dataset.moeLayers = String(rows);
    document.body.dataset.moeRouted = String(load.layers.reduce((a, l) => a + l.tokens.reduce((x, y) => x + y, 0), 0));
  }

  function drawChart(id, values, fixedMax) {
    const svg = $(id);
    const W = 300, H = 110, pad = 4;
    const finite = values.filter((v) => v !== null && isFinite(v));
    const max = fixedMax !== undefined ? fixedMax : Math.max(1e-9, ...finite) * 1.1;
    const points = [];
    values.forEach((v, i) => {
      if (v === null || !isFinite(v)) return;
      const x = pad + ((W - 2 * pad) * i) / Math.max(1, kHistory - 1);
      const y = H - pad - ((H - 2 * pad) * v) / max;
      points.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    const ns = 'http://www.w3.org/2000/svg';
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    for (const f of [0.25, 0.5, 0.75]) {
      const line = document.createElementNS(ns, 'line');
      const y = H - pad - (H - 2 * pad) * f;
      line.setAttribute('x1', pad); line.setAttribute('x2', W - pad);
      line.setAttribute('y1', y); line.setAttribute('y2', y);
      line.setAttribute('class', 'grid');
      svg.appendChild(line);
    }
    const label = document.createElementNS(ns, 'text');
    label.setAttribute('x', pad + 2); label.setAttribute('y', 12);
    label.textContent = fixedMax === 1 ? '100%' : max.toPrecision(3);
    svg.appendChild(label);
    const poly = document.createElementNS(ns, 'polyline');
    poly.setAttribute('points', points.join(' '));
    svg.appendChild(poly);
  }

  function cell(row, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function renderTables(s) {
    const body = $('requests').tBodies[0];
    body.replaceChildren();
    for (const r of s.active) {
      const tr = document.createElement('tr');
      tr.dataset.id = r.id;
      cell(tr, r.id);
      cell(tr, r.state, 'state-' + r.state);
      cell(tr, r.prompt_tokens);
      cell(tr, r.cached_tokens);
      cell(tr, r.computed_tokens);
      cell(tr, r.generated_tokens);
      cell(tr, r.blocks_held);
      cell(tr, r.age_s.toFixed(1) + ' s');
      body.appendChild(tr);
    }
    const prefixes = $('prefixes').tBodies[0];
    prefixes.replaceChildren();
    for (const p of s.top_prefixes) {
      const tr = document.createElement('tr');
      cell(tr, p.tokens);
      cell(tr, p.blocks);
      cell(tr, p.hits);
      cell(tr, p.in_use ? 'in use' : age(p.last_use_age_s));
      cell(tr, JSON.stringify(p.preview).slice(1, -1), 'text');
      prefixes.appendChild(tr);
    }
  }

  // One row per tier, the pool first and then the tiers below it (host, disk, remote), each
  // with a usage bar: the KV the server holds, level by level.
  function renderTiers(tiers) {
    const body = $('tiers').tBodies[0];
    body.replaceChildren();
    for (const t of tiers) {
      const tr = document.createElement('tr');
      tr.dataset.tier = t.tier;
      cell(tr, t.tier);
      cell(tr, t.memory || t.medium);
      const usage = t.capacity_blocks > 0 ? t.used_blocks / t.capacity_blocks : 0;
      const bar = document.createElement('td');
      const fill = document.createElement('i');
      fill.className = 'bar';
      bar.appendChild(fill);
      fill.style.width = (usage * 100).toFixed(1) + '%';
      tr.appendChild(bar);
      for (const v of [t.used_blocks, t.capacity_blocks, t.hit_blocks, t.evictions]) {
        cell(tr, v);
        tr.lastChild.dataset.value = String(v);
      }
      for (const v of [t.bytes_read || 0, t.bytes_written || 0, t.corrupt_records || 0]) {
        cell(tr, t.tier === 'pool' ? '–' : (v >= 1048576 ? (v / 1048576).toFixed(1) + ' MiB' :
          v >= 1024 ? (v / 1024).toFixed(1) + ' KiB' : String(v)));
        tr.lastChild.dataset.value = String(v);
      }
      body.appendChild(tr);
    }
  }

  // Under the block map: the blocks each tier holds (the pool's map is drawn; the tiers below
  // it are counted), and the pool blocks loading from them.
  function renderTierCounts(s) {
    const el = $('tier-counts');
    el.replaceChildren();
    for (const t of s.tiers) {
      const span = document.createElement('span');
      span.className = 'tier-count';
      span.dataset.tier = t.tier;
      span.dataset.value = String(t.used_blocks);
      span.textContent = t.tier + ' ' + t.used_blocks + ' of ' + t.capacity_blocks + ' blocks';
      el.appendChild(span);
      el.appendChild(document.createTextNode(' · '));
    }
    const loading = document.createElement('span');
    loading.id = 'v-loading';
    loading.dataset.value = String(s.pool.loading);
    loading.textContent = s.pool.loading + ' loading';
    el.appendChild(loading);
  }

  function interval(s, p) {
    if (!p) return { hitRate: null, hitTokensPerS: null, ttftMs: null, itlMs: null };
    const dt = Math.max(1e-3, s.uptime_s - p.uptime_s);
    const dq = s.prefix_cache.queried_tokens - p.prefix_cache.queried_tokens;
    const dh = s.prefix_cache.hit_tokens - p.prefix_cache.hit_tokens;
    const mean = (h, q) => (h.count > q.count ? ((h.sum - q.sum) / (h.count - q.count)) * 1000 : null);
    return {
      hitRate: dq > 0 ? dh / dq : null,
      hitTokensPerS: dh / dt,
      ttftMs: mean(s.latency.ttft, p.latency.ttft),
      itlMs: mean(s.latency.inter_token, p.latency.inter_token),
    };
  }

  function render(s) {
    const pool = s.pool;
    $('model').textContent = s.served_model + ' · ' + s.model;
    $('uptime').textContent = Math.round(s.uptime_s) + ' s';
    setValue('v-steps', s.steps);
    setValue('v-usage', pool.usage_ratio, pct(pool.usage_ratio));
    setValue('v-in-use', pool.in_use);
    setValue('v-cached', pool.cached);
    setValue('v-free', pool.free);
    setValue('v-pinned', pool.pinned);
    setValue('v-num-blocks', pool.num_blocks);
    setValue('v-hit-rate', s.prefix_cache.hit_rate, pct(s.prefix_cache.hit_rate));
    setValue('v-hit-tokens', s.prefix_cache.hit_tokens);
    setValue('v-queried-tokens', s.prefix_cache.queried_tokens);
    setValue('v-running', s.requests.running);
    setValue('v-waiting', s.requests.waiting);
    setValue('v-gen-tokens', s.tokens.generation);
    setValue('v-ttft-p50', s.latency.ttft.p50, ms(s.latency.ttft.p50));
    setValue('v-ttft-p99', s.latency.ttft.p99, ms(s.latency.ttft.p99));
    setValue('v-ttft-count', s.latency.ttft.count);
    setValue('v-itl-p50', s.latency.inter_token.p50, ms(s.latency.inter_token.p50));
    setValue('v-itl-p99', s.latency.inter_token.p99, ms(s.latency.inter_token.p99));
    setValue('v-evictions', s.prefix_cache.evicted_blocks);
    setValue('v-preemptions', s.requests.preemptions);
    $('pool-desc').textContent = pool.num_blocks + ' blocks × ' + pool.block_size + ' tokens, ' +
      pool.kv_dtype + '/' + pool.kv_layout + ', ' + (pool.bytes_per_block / 1024).toFixed(1) + ' KiB each, ' +
      'eviction ' + s.prefix_cache.policy;
    renderTiers(s.tiers);
    renderTierCounts(s);
    if (pool.block_map !== undefined) drawBlockMap(pool.block_map);
    history.push(interval(s, previous));
    if (history.length > kHistory) history.shift();
    drawChart('chart-hit', history.map((h) => h.hitRate), 1);
    drawChart('chart-hit-tokens', history.map((h) => h.hitTokensPerS));
    drawChart('chart-ttft', history.map((h) => h.ttftMs));
    drawChart('chart-itl', history.map((h) => h.itlMs));
    renderTables(s);
    previous = s;
    updates++;
    document.body.dataset.updates = String(updates);
    document.body.dataset.steps = String(s.steps);
  }

  function status(text, cls) {
    const el = $('status');
    el.textContent = text;
    el.className = 'status ' + (cls || '');
  }

  async function poll() {
    try {
      const headers = {};
      if (key()) headers.Authorization = 'Bearer ' + key();
      const res = await fetch('/v1/kv/stats?block_map=1', { headers, cache: 'no-store' });
      if (res.status === 401) {
        $('key-form').hidden = false;
        status('API key needed', 'error');
      } else if (!res.ok) {
        status('HTTP ' + res.status, 'error');
      } else {
        $('key-form').hidden = true;
        const s = await res.json();
        if (s.experts > 0) {  // a mixture-of-experts model: its expert load too
          const moe = await fetch('/v1/moe/experts', { headers, cache: 'no-store' });
          if (moe.ok) renderExperts(await moe.json());
        }
        render(s);
        status('live', 'live');
      }
    } catch (e) {
      status('server unreachable', 'error');
    }
    setTimeout(poll, kPollMs);
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('key-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      sessionStorage.setItem('pagoda-api-key', $('key').value.trim());
      $('key').value = '';
    });
    poll();
  });
})();
