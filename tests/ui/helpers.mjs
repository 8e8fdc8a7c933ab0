// What every browser test of ledgerd's page (ui/) shares: the run's
// configuration (written by test_ui.py), Debian's chromium through the
// pinned playwright-core of tests/ui/node, the API as ground truth, and a
// watch on each page for what must never happen: a console error, an
// uncaught exception, a CSP violation, a request to another origin, a
// /ui/ answer without its security headers.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before } from 'node:test';

const require = createRequire(new URL('./node/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const config = JSON.parse(readFileSync(process.env.LEDGER_UI_TESTS, 'utf8'));
export const origin = new URL(config.url).origin;
export const S = config.scenarios;
export const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
export const TIME_IN = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/;

// The headers of every /ui/ answer (ui/README.md), names in lower case.
export const UI_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

export function shot(name) {
  return path.join(config.screenshots, name);
}

export async function launch() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
}

// GET of the API with @token; returns the parsed answer (asserts 200).
export async function api(pathname, token = config.tokens.admin) {
  const r = await fetch(config.url + pathname, { headers: { authorization: 'Bearer ' + token } });
  const text = await r.text();
  assert.equal(r.status, 200, `${pathname}: ${text}`);
  return JSON.parse(text);
}

// Every page of a list endpoint, in order.
export async function apiAll(pathname, token) {
  const items = [];
  let cursor = null;
  do {
    const sep = pathname.includes('?') ? '&' : '?';
    const page = await api(pathname + sep + 'limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''), token);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return items;
}

// Retries @fn (an async function that asserts) until it passes or
// @timeout ms have gone by; then the last failure is the test's.
export async function poll(fn, timeout = 5000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

// A new context and page (1400x900) with the watch installed. @options go
// to browser.newContext (bypassCSP: the page must be safe without its CSP).
export async function openPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, ...options });
  const watch = { requests: [], uiResponses: [], console: [], pageErrors: [], csp: [] };
  await context.exposeFunction('__ledgerdTestCsp', (v) => watch.csp.push(v));
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__ledgerdTestCsp(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`);
    }, true);
  });
  const page = await context.newPage();
  page.on('request', (req) => watch.requests.push({ url: req.url(), headers: req.headers() }));
  page.on('response', (res) => {
    if (res.url().startsWith(origin + '/ui')) watch.uiResponses.push(res);
  });
  page.on('console', (msg) => {
    if (msg.type() === 'error' || msg.type() === 'warning') {
      watch.console.push(`${msg.type()}: ${msg.text()} @ ${msg.location().url}`);
    }
  });
  page.on('pageerror', (err) => watch.pageErrors.push(String(err)));
  return { context, page, watch };
}

// What must hold of every page once a test is done with it. @console: the
// console lines this test expects (regular expressions), none by default.
// The browser's own request for /favicon.ico is test_security.mjs's to judge.
const FAVICON = /^error: Failed to load resource: .* @ http:\/\/[^/]+\/favicon\.ico$/;

export async function checkWatch({ context, page, watch }, { console: expected = [], error = false } = {}) {
  assert.deepEqual(watch.pageErrors, []);
  assert.deepEqual(watch.csp, []);
  assert.deepEqual(watch.console.filter((line) => !FAVICON.test(line) && !expected.some((re) => re.test(line))), []);
  if (!error) assert.equal(await page.isVisible('#error'), false, `#error shows ${await page.textContent('#error')}`);
  assert.ok(watch.requests.length > 0);
  for (const req of watch.requests) assert.equal(new URL(req.url).origin, origin, req.url);
  const kinds = new Set();
  for (const res of watch.uiResponses) {
    const headers = await res.allHeaders();
    for (const [name, value] of Object.entries(UI_HEADERS)) assert.equal(headers[name], value, `${name} of ${res.url()}`);
    kinds.add(res.request().resourceType());
  }
  for (const kind of ['document', 'script', 'stylesheet']) assert.ok(kinds.has(kind), `no ${kind} answer from /ui/ seen`);
  assert.deepEqual(await context.cookies(), []);
  await context.close();
}

// The page opened with @token pasted into the token form; waits for
// #whoami to name the token's tenant and role.
export async function login(page, token, role) {
  await page.goto(config.url + '/ui/');
  await page.locator('#token-form').waitFor({ state: 'visible' });
  await page.fill('input#token', token);
  await page.locator('#token-form [type=submit], #token-form button:not([type=button])').first().click();
  await poll(async () => assert.equal(await page.textContent('#whoami'), `tenant ${config.tenant} · role ${role}`));
}

// A test file's browser and one tab signed in as @role, opened before its
// tests and closed after them: use the returned object's .tab once they run.
export function signedInTab(role) {
  const held = { browser: null, tab: null };
  before(async () => {
    held.browser = await launch();
    held.tab = await openPage(held.browser);
    await login(held.tab.page, config.tokens[role], role);
  });
  after(async () => {
    await held.browser?.close();
  });
  return held;
}

// Goes to a hash route and waits for @ready (a selector) to be visible.
export async function route(page, hash, ready) {
  await page.evaluate((h) => { window.location.hash = h; }, hash);
  if (ready) await page.locator(ready).first().waitFor({ state: 'visible' });
}

// The text of a cell that shows nothing: the API's null.
export function isEmpty(text) {
  return ['', '-', '—', '–'].includes(text.trim());
}
