// Pagoda router's dashboard: polls GET /router/stats once a second and draws it. Plain
// JavaScript, no dependencies, no other origin (the router's Content-Security-Policy forbids
// one). The API key, when the router wants one, is typed into the page, kept in sessionStorage
// and sent as an Authorization header: never in a URL.
'use strict';

(function () {
  const kPollMs = 1000;
  const kHistory = 120;            // points per chart
  const kSeries = 6;               // colours for workers (s0..s5), then they repeat
  const history = [];              // per poll: {total: {...}, workers: {url: {...}}}
  let previous = null;             // the last snapshot, for per-interval rates
  let updates = 0;

  const $ = (id) => document.getElementById(id);
  const key = () => sessionStorage.getItem('pagoda-router-api-key') || '';
  const ms = (s) => (s * 1000).toFixed(1);
  const pct = (x) => (x * 100).toFixed(1);
  const ns = 'http://www.w3.org/2000/svg';

  function setValue(id, value, text) {
    const el = $(id);
    if (!el) return;
    el.dataset.value = String(value);
    el.textContent = text !== undefined ? text : String(value);
  }

  function svgEl(name, attrs) {
    const el = document.createElementNS(ns, name);
    for (const k in attrs) el.setAttribute(k, attrs[k]);
    return el;
  }

  // series: [{cls, values: [number|null]}]; one polyline each over a shared scale.
  function drawChart(id, series, fixedMax) {
    const svg = $(id);
    const W = 300, H = 110, pad = 4;
    const finite = [];
    for (const s of series) for (const v of s.values) if (v !== null && isFinite(v)) finite.push(v);
    const max = fixedMax !== undefined ? fixedMax : Math.max(1e-9, ...finite) * 1.1;
    svg.replaceChildren();
    for (const f of [0.25, 0.5, 0.75]) {
      const y = H - pad - (H - 2 * pad) * f;
      svg.appendChild(svgEl('line', { x1: pad, x2: W - pad, y1: y, y2: y, class: 'grid' }));
    }
    const label = svgEl('text', { x: pad + 2, y: 12 });
    label.textContent = fixedMax === 1 ? '100%' : max.toPrecision(3);
    svg.appendChild(label);
    for (const s of series) {
      const points = [];
      s.values.forEach((v, i) => {
        if (v === null || !isFinite(v)) return;
        const x = pad + ((W - 2 * pad) * i) / Math.max(1, kHistory - 1);
        const y = H - pad - ((H - 2 * pad) * v) / max;
        points.push(x.toFixed(1) + ',' + y.toFixed(1));
      });
      svg.appendChild(svgEl('polyline', { points: points.join(' '), class: s.cls }));
    }
  }

  // Two bars per worker: predicted and reported cached tokens.
  function drawPrediction(workers) {
    const svg = $('chart-prediction');
    const W = 640, H = 120, top = 14, bottom = 16;
    svg.replaceChildren();
    const max = Math.max(1, ...workers.map((w) => Math.max(w.predicted_cached_tokens, w.reported_cached_tokens)));
    const slot = W / Math.max(1, workers.length);
    const bar = Math.min(60, slot / 3);
    workers.forEach((w, i) => {
      const x0 = i * slot + slot / 2 - bar;
      [['predicted', w.predicted_cached_tokens], ['reported', w.reported_cached_tokens]].forEach(([cls, v], k) => {
        const h = ((H - top - bottom) * v) / max;
        svg.appendChild(svgEl('rect', { x: x0 + k * bar, y: H - bottom - h, width: bar - 2, height: h, class: cls }));
        const t = svgEl('text', { x: x0 + k * bar, y: H - bottom - h - 3 });
        t.textContent = String(v);
        svg.appendChild(t);
      });
      const name = svgEl('text', { x: i * slot + slot / 2 - bar, y: H - 4 });
      name.textContent = w.url.replace(/^http:\/\//, '');
      svg.appendChild(name);
    });
  }

  function cell(row, text, value, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (value !== undefined) td.dataset.value = String(value);
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function renderWorkers(s) {
    const body = $('workers').tBodies[0];
    body.replaceChildren();
    s.workers.forEach((w, i) => {
      const tr = document.createElement('tr');
      tr.dataset.url = w.url;
      const nameCell = document.createElement('td');
      nameCell.className = 'url';
      const sw = document.createElement('i');
      sw.className = 'sw s' + (i % kSeries);
      nameCell.append(sw, w.url);
      tr.appendChild(nameCell);
      cell(tr, w.up ? 'up' : 'down: ' + w.down_reason, w.up ? 1 : 0, w.up ? 'health-up' : 'health-down');
      const ev = w.events;
      cell(tr, ev ? (ev.synced ? 'synced' : 'resyncing') + ' · ' + ev.batches + ' batches' : (w.predictable ? 'waiting' : 'off'),
        ev && ev.synced ? 1 : 0);
      cell(tr, w.in_flight, w.in_flight);
      cell(tr, w.active_blocks, w.active_blocks);
      cell(tr, w.pending_prefill_tokens, w.pending_prefill_tokens);
      cell(tr, w.indexed_blocks, w.indexed_blocks);
      cell(tr, w.routed, w.routed);
      cell(tr, w.failed_attempts, w.failed_attempts);
      cell(tr, w.predicted_cached_tokens, w.predicted_cached_tokens);
      cell(tr, w.reported_cached_tokens, w.reported_cached_tokens);
      cell(tr, pct(w.hit_rate) + '%', w.hit_rate);
      cell(tr, w.ttft.count > 0 ? ms(w.ttft.p50) + ' ms' : '–', w.ttft.p50);
      body.appendChild(tr);
    });
    const legend = $('series-legend');
    legend.replaceChildren();
    s.workers.forEach((w, i) => {
      const span = document.createElement('span');
      const sw = document.createElement('i');
      sw.className = 'sw s' + (i % kSeries);
      span.append(sw, w.url.replace(/^http:\/\//, ''));
      legend.appendChild(span);
    });
    const total = document.createElement('span');
    const sw = document.createElement('i');
    sw.className = 'sw total';
    total.append(sw, 'all workers');
    legend.appendChild(total);
  }

  // Rates over the last poll interval: hit rate, mean TTFT (ms), routed/s, retries/s.
  function rates(cur, prev, dt) {
    if (!prev) return { hitRate: null, ttftMs: null, routed: null };
    const dp = cur.prompt - prev.prompt;
    const dc = cur.ttft.count - prev.ttft.count;
    return {
      hitRate: dp > 0 ? (cur.reported - prev.reported) / dp : null,
      ttftMs: dc > 0 ? ((cur.ttft.sum - prev.ttft.sum) / dc) * 1000 : null,
      routed: (cur.routed - prev.routed) / dt,
    };
  }
  const totals = (s) => ({ prompt: s.tokens.prompt, reported: s.tokens.reported_cached, ttft: s.latency.ttft,
    routed: s.workers.reduce((a, w) => a + w.routed, 0) });
  const workerTotals = (w) => ({ prompt: w.prompt_tokens, reported: w.reported_cached_tokens, ttft: w.ttft, routed: w.routed });

  function interval(s, p) {
    const dt = p ? Math.max(1e-3, s.uptime_s - p.uptime_s) : 1;
    const point = { total: rates(totals(s), p && totals(p), dt), workers: {},
      retries: p ? (s.requests.retries - p.requests.retries) / dt : null };
    for (const w of s.workers) {
      const pw = p && p.workers.find((x) => x.url === w.url);
      point.workers[w.url] = rates(workerTotals(w), pw && workerTotals(pw), dt);
    }
    return point;
  }

  function seriesOf(s, field) {
    const out = s.workers.map((w, i) => ({ cls: 's' + (i % kSeries),
      values: history.map((h) => (h.workers[w.url] ? h.workers[w.url][field] : null)) }));
    out.push({ cls: 'total', values: history.map((h) => h.total[field]) });
    return out;
  }

  function render(s) {
    $('policy').textContent = s.policy;
    $('uptime').textContent = Math.round(s.uptime_s) + ' s';
    setValue('v-workers-up', s.workers_up);
    setValue('v-workers', s.workers.length);
    setValue('v-synced', s.workers.filter((w) => w.events && w.events.synced).length);
    setValue('v-requests', s.requests.total);
    setValue('v-in-flight', s.requests.in_flight);
    setValue('v-unroutable', s.requests.unroutable);
    setValue('v-retries', s.requests.retries);
    setValue('v-failed-attempts', s.workers.reduce((a, w) => a + w.failed_attempts, 0));
    setValue('v-broken-streams', s.requests.broken_streams);
    setValue('v-hit-rate', s.tokens.hit_rate, pct(s.tokens.hit_rate));
    setValue('v-reported-cached', s.tokens.reported_cached);
    setValue('v-prompt-tokens', s.tokens.prompt);
    setValue('v-predicted-cached', s.tokens.predicted_cached);
    const confirmed = s.tokens.predicted_cached > 0 ? s.tokens.reported_cached / s.tokens.predicted_cached : 0;
    setValue('v-confirmed', confirmed, pct(confirmed));
    setValue('v-ttft-p50', s.latency.ttft.p50, ms(s.latency.ttft.p50));
    setValue('v-ttft-p99', s.latency.ttft.p99, ms(s.latency.ttft.p99));
    setValue('v-ttft-count', s.latency.ttft.count);
    renderWorkers(s);
    drawPrediction(s.workers);
    history.push(interval(s, previous));
    if (history.length > kHistory) history.shift();
    drawChart('chart-hit', seriesOf(s, 'hitRate'), 1);
    drawChart('chart-ttft', seriesOf(s, 'ttftMs'));
    drawChart('chart-routed', seriesOf(s, 'routed'));
    drawChart('chart-retries', [{ cls: 'total', values: history.map((h) => h.retries) }]);
    previous = s;
    updates++;
    document.body.dataset.updates = String(updates);
    document.body.dataset.requests = String(s.requests.total);
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
      const res = await fetch('/router/stats', { headers, cache: 'no-store' });
      if (res.status === 401) {
        $('key-form').hidden = false;
        status('API key needed', 'error');
      } else if (!res.ok) {
        status('HTTP ' + res.status, 'error');
      } else {
        $('key-form').hidden = true;
        render(await res.json());
        status('live', 'live');
      }
    } catch (e) {
      status('router unreachable', 'error');
    }
    setTimeout(poll, kPollMs);
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('key-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      sessionStorage.setItem('pagoda-router-api-key', $('key').value.trim());
      $('key').value = '';
    });
    poll();
  });
})();
