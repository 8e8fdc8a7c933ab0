// What the page must never do: run text from the API as markup, keep the
// token anywhere but sessionStorage, talk to another origin, or be framed.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { S, api, checkWatch, config, launch, login, openPage, origin, poll, route } from './helpers.mjs';

const admin = config.tokens.admin;
const H = S.hostile.hostile;
let browser;

before(async () => {
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

// Nothing of the hostile text ran or became an element.
async function nothingInjected(page, watch) {
  assert.equal(await page.evaluate(() => typeof window.__xss), 'undefined');
  const dom = await page.evaluate(() => ({
    img: document.querySelectorAll('img').length,
    handlers: [...document.querySelectorAll('*')].filter((el) => [...el.attributes].some((a) => a.name.startsWith('on'))).length,
    scripts: [...document.querySelectorAll('script')].map((s) => ({ src: s.src, inline: s.textContent.trim().length })),
  }));
  assert.equal(dom.img, 0);
  assert.equal(dom.handlers, 0);
  assert.ok(dom.scripts.length > 0);
  for (const s of dom.scripts) {
    assert.equal(s.inline, 0, 'an inline script');
    assert.ok(s.src.startsWith(origin + '/ui/'), `a script from ${s.src}`);
  }
  assert.ok(!watch.requests.some((r) => /\/x$/.test(new URL(r.url).pathname)), 'the injected image was loaded');
}

async function hostileReview(options) {
  const tab = await openPage(browser, options);
  const { page, watch } = tab;
  await login(page, admin, 'admin');

  const history = await api('/v1/requests/' + S.hostile.rid, admin);
  await route(page, '#/request/' + S.hostile.rid);
  await poll(async () => {
    assert.equal(await page.textContent('h2#request-title'), S.hostile.rid);
    assert.equal(await page.locator('table#events tr[data-seq]').count(), history.events.length);
  });
  await nothingInjected(page, watch);
  const text = await page.textContent('#view-request');
  for (const field of ['replica', 'model_revision', 'tool', 'owner', 'reason']) {
    assert.ok(text.includes(`${field}:${H}`), `${field}'s text is not shown as text`);
  }
  assert.ok((await page.textContent('svg#timeline g.lane[data-attempt-id="att-1"] text.lane-label')).includes(`replica:${H}`));
  assert.equal((await page.textContent('dl#request-summary dd[data-field="model_revision"]')).trim(), `model_revision:${H}`);
  for (const cid of ['call_01', 'call_02']) {
    assert.equal(await page.textContent(`table#tool-calls tr[data-tool-call-id="${cid}"] .tool`), `tool:${H}`);
  }
  assert.equal(await page.textContent('table#tool-calls tr[data-tool-call-id="call_02"] .owner'), `owner:${H}`);
  const details = await page.$$eval('table#events tr[data-seq] .detail', (tds) => tds.map((td) => td.textContent));
  assert.equal(details.filter((d) => JSON.parse(d).reason === `reason:${H}`).length, 2);
  await nothingInjected(page, watch);

  await page.click('nav a[href="#/unknown"]');
  const row = page.locator(`table#unknown tr[data-key="${S.hostile.rid}:call_02"]`);
  await row.waitFor({ state: 'visible' });
  assert.equal(await row.locator('.tool').textContent(), `tool:${H}`);
  assert.equal(await row.locator('.owner').textContent(), `owner:${H}`);
  await page.click(`table#unknown tr[data-key="${S.hostile.rid}:call_02"] button.resolve-open`);
  await page.locator('form#resolve-form').waitFor({ state: 'visible' });
  await nothingInjected(page, watch);

  await page.click('nav a[href="#/requests"]');
  await page.locator(`table#requests tr[data-request-id="${S.hostile.rid}"]`).waitFor({ state: 'visible' });
  await nothingInjected(page, watch);
  await checkWatch(tab);
}

test('hostile text from the API is shown as text and runs nowhere', async () => {
  await hostileReview({});
});

test('the page is safe without its CSP too: nothing is parsed as markup', async () => {
  await hostileReview({ bypassCSP: true });
});

test('the token lives in sessionStorage only and goes out only as Authorization', async () => {
  const tab = await openPage(browser);
  const { page, context, watch } = tab;
  await login(page, admin, 'admin');
  await route(page, '#/request/' + S.zombie.rid);
  await poll(async () => assert.equal(await page.textContent('h2#request-title'), S.zombie.rid));
  const storage = await page.evaluate(() => ({
    session: sessionStorage.getItem('ledgerd.token'),
    local: Object.entries(localStorage),
    cookie: document.cookie,
  }));
  assert.equal(storage.session, admin);
  assert.ok(!storage.local.some(([k, v]) => k.includes(admin) || v.includes(admin)), 'the token is in localStorage');
  assert.equal(storage.cookie, '');
  assert.deepEqual(await context.cookies(), []);
  assert.ok(!page.url().includes(admin));
  const apiCalls = watch.requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
  assert.ok(apiCalls.length >= 2);
  for (const r of watch.requests) {
    assert.ok(!r.url.includes(admin), `the token in ${r.url}`);
    const auth = r.headers.authorization;
    if (new URL(r.url).pathname.startsWith('/v1/')) assert.equal(auth, 'Bearer ' + admin, r.url);
    else assert.equal(auth, undefined, r.url);
  }
  // A reload keeps the session; #forget-token ends it.
  await page.reload();
  await poll(async () => assert.equal(await page.textContent('#whoami'), `tenant ${config.tenant} · role admin`));
  await page.click('#forget-token');
  await page.locator('#token-form').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('ledgerd.token')), null);
  await checkWatch(tab);
});

test('a wrong token gets the error and the token form again', async () => {
  const tab = await openPage(browser);
  const { page } = tab;
  await page.goto(config.url + '/ui/');
  await page.locator('#token-form').waitFor({ state: 'visible' });
  await page.fill('input#token', 'not-a-ledgerd-token-' + 'x'.repeat(40));
  await page.locator('#token-form [type=submit], #token-form button:not([type=button])').first().click();
  await poll(async () => assert.match(await page.textContent('#error'), /^401 unauthorized: \S/));
  assert.equal(await page.isVisible('#error'), true);
  await page.locator('#token-form').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('ledgerd.token')), null);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  // The right token then works, and the error goes.
  await page.fill('input#token', admin);
  await page.locator('#token-form [type=submit], #token-form button:not([type=button])').first().click();
  await poll(async () => assert.equal(await page.textContent('#whoami'), `tenant ${config.tenant} · role admin`));
  await poll(async () => assert.equal(await page.isVisible('#error'), false));
  await checkWatch(tab, { console: [/^error: Failed to load resource: the server responded with a status of 401 \(Unauthorized\) @ http:\/\/[^/]+\/v1\//] });
});

test('the page refuses to be framed', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const refused = [];
  page.on('console', (msg) => refused.push(msg.text()));
  // An ordinary page of another origin (here: about:blank) frames /ui/.
  await page.setContent(`<iframe src="${config.url}/ui/"></iframe>`);
  await poll(async () => assert.ok(refused.some((t) => /frame-ancestors|X-Frame-Options/.test(t)), refused.join('\n')));
  const frame = page.frames().find((f) => f !== page.mainFrame());
  assert.equal(await frame.evaluate(() => document.querySelector('#token-form') !== null).catch(() => false), false);
  await context.close();
});

test('loading the page logs no error, not even for its icon', async () => {
  // Without an icon of its own under /ui/ (img-src 'self' allows one) the
  // browser asks ledgerd for /favicon.ico, and a 404 is a console error.
  // A browser of its own: one remembers the icons it failed to load.
  const own = await launch();
  try {
    const tab = await openPage(own);
    const { page, watch } = tab;
    await login(page, config.tokens.reviewer, 'reviewer');
    await page.waitForLoadState('networkidle');
    await page.waitForTimeout(300);
    assert.deepEqual(watch.console, []);
    await checkWatch(tab);
  } finally {
    await own.close();
  }
});
