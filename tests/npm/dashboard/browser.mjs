// What the dashboard checks share: headless Debian Chromium through puppeteer-core, a page
// whose every request is recorded (one to another host is aborted and reported), console
// errors, and the Prometheus text parsed into {"name{labels}": value}.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.trim()) continue;
    const at = line.lastIndexOf(' ');
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

// Runs body(page, seen) in a fresh browser with a 1280x1400 page on `origin`; seen.requested,
// seen.foreign (other hosts, aborted) and seen.consoleErrors fill as it goes. A 401 in the
// console is expected when a key is needed (the page asks for it).
export async function withPage(origin, expect401, body) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagoda-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir,
    args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--no-first-run', '--disable-sync', '--disable-dev-shm-usage', '--window-size=1280,1400'],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 1400 });
    const seen = { requested: [], foreign: [], consoleErrors: [] };
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      seen.requested.push(req.url());
      if (!req.url().startsWith(origin + '/') && !req.url().startsWith('data:')) {
        seen.foreign.push(req.url());
        req.abort();
      } else {
        req.continue();
      }
    });
    page.on('console', (m) => {
      if (m.type() === 'error' && !(expect401 && m.text().includes('401'))) seen.consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => seen.consoleErrors.push(String(e)));
    return await body(page, seen);
  } finally {
    await browser.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

// A check script's verdict: check(ok, what) records a failure, report(result) prints one JSON
// line {...result, ok, failures} and exits 1 when anything failed.
export function checker() {
  const failures = [];
  return {
    failures,
    check: (ok, what) => { if (!ok) failures.push(what); },
    report(result) {
      result.ok = failures.length === 0;
      result.failures = failures;
      console.log(JSON.stringify(result));
      process.exit(result.ok ? 0 : 1);
    },
  };
}
