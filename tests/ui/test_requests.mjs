// The requests view (#/requests): each scenario's row, its status and
// attention badges, the status and attention filters, and paging, read
// against GET /v1/requests.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { S, TIME, apiAll, checkWatch, config, poll, route, shot, signedInTab } from './helpers.mjs';

const SCENARIOS = ['plain', 'failover', 'terminated', 'zombie', 'unknown', 'hostile'];
const token = config.tokens.reviewer;
const held = signedInTab('reviewer');

// The rows of table#requests as the page shows them.
async function rows(page) {
  return page.$$eval('table#requests tr[data-request-id]', (trs) => trs.map((tr) => {
    const cell = (c) => tr.querySelector('.' + c)?.textContent.trim() ?? null;
    const link = tr.querySelector('.request-id a');
    return {
      id: tr.getAttribute('data-request-id'),
      link: link && { text: link.textContent.trim(), href: link.getAttribute('href') },
      status: cell('status'),
      phase: cell('phase'),
      attempts: cell('attempts'),
      createdAt: cell('created-at'),
      badges: [...tr.querySelectorAll('.attention span.badge[data-reason]')].map((b) => b.getAttribute('data-reason')),
      badgeText: [...tr.querySelectorAll('.attention span.badge')].map((b) => b.textContent.trim()),
    };
  }));
}

// Waits until the table shows exactly @ids, in that order.
async function shows(page, ids) {
  return poll(async () => {
    const got = await rows(page);
    assert.deepEqual(got.map((r) => r.id), ids);
    return got;
  });
}

// Waits until the table shows the first page of @all (the whole list, as
// the API pages it): a prefix, the whole of it when there is no next page.
// The page chooses its page size; returns the rows.
async function showsFirstPage(page, all) {
  return poll(async () => {
    const got = await rows(page);
    assert.ok(got.length > 0 || all.length === 0);
    assert.deepEqual(got.map((r) => r.id), all.slice(0, got.length).map((i) => i.request_id));
    assert.equal(await page.isDisabled('button#next-page'), got.length === all.length);
    assert.equal(await page.isDisabled('button#prev-page'), true);
    got.forEach((row, i) => sameRow(row, all[i]));
    return got;
  });
}

function sameRow(row, item) {
  assert.equal(row.id, item.request_id);
  assert.deepEqual(row.link, { text: item.request_id, href: '#/request/' + encodeURIComponent(item.request_id) });
  assert.equal(row.status, item.status, item.request_id);
  assert.equal(row.phase, item.phase, item.request_id);
  assert.equal(row.attempts, String(item.attempts), item.request_id);
  assert.equal(row.createdAt, item.created_at, item.request_id);
  assert.match(row.createdAt, TIME);
  assert.deepEqual(row.badges, item.attention, item.request_id);
  assert.ok(row.badgeText.every((t) => t.length > 0), `an empty badge in ${item.request_id}`);
}

test('the first page lists the newest requests with status and attention, as the API does', async () => {
  const { page } = held.tab;
  await route(page, '#/requests', 'table#requests tr[data-request-id]');
  const got = await showsFirstPage(page, await apiAll('/v1/requests', token));
  // Each scenario (the newest requests) is on it, with the status and badges the fill gave it.
  for (const name of SCENARIOS) {
    const row = got.find((r) => r.id === S[name].rid);
    assert.ok(row, `${name} not on the first page`);
    assert.equal(row.status, S[name].status, name);
    assert.deepEqual(row.badges, S[name].attention, name);
  }
  assert.equal(await page.isDisabled('button#next-page'), false);
  await page.screenshot({ path: shot('requests.png'), fullPage: false });
});

test('a row links to its request view', async () => {
  const { page } = held.tab;
  await page.click(`table#requests tr[data-request-id="${S.zombie.rid}"] .request-id a`);
  await poll(async () => assert.equal(await page.textContent('h2#request-title'), S.zombie.rid));
  assert.equal(new URL(page.url()).hash, '#/request/' + S.zombie.rid);
  assert.equal(await page.isVisible('#view-request'), true);
  assert.equal(await page.isVisible('#view-requests'), false);
  await page.click('nav a[href="#/requests"]');
  await page.locator('#view-requests').waitFor({ state: 'visible' });
});

test('paging walks every request once, newest first, and back', async () => {
  const { page } = held.tab;
  await route(page, '#/requests', 'table#requests tr[data-request-id]');
  const all = (await apiAll('/v1/requests', token)).map((i) => i.request_id);
  assert.ok(all.length > 60);
  const pages = [];
  let seen = [];
  for (;;) {
    // A page the page shows is the next slice of the whole list.
    const got = await poll(async () => {
      const r = (await rows(page)).map((x) => x.id);
      assert.ok(r.length > 0);
      assert.deepEqual(r, all.slice(seen.length, seen.length + r.length));
      return r;
    });
    pages.push(got);
    seen = seen.concat(got);
    assert.equal(await page.isDisabled('button#prev-page'), pages.length === 1);
    if (await page.isDisabled('button#next-page')) break;
    assert.ok(pages.length < 100, 'next-page never disables');
    await page.click('button#next-page');
    await poll(async () => assert.notEqual((await rows(page))[0]?.id, got[0]));
  }
  assert.deepEqual(seen, all);
  assert.ok(pages.length >= 2, `one page of ${all.length} requests: nothing to page`);
  assert.ok(pages.slice(0, -1).every((p) => p.length === pages[0].length), 'pages of unequal size');
  // Back to the first page, one page at a time.
  for (let i = pages.length - 2; i >= 0; i--) {
    await page.click('button#prev-page');
    await shows(page, pages[i]);
    assert.equal(await page.isDisabled('button#next-page'), false);
  }
  assert.equal(await page.isDisabled('button#prev-page'), true);
});

test('the status filter narrows the list to that status', async () => {
  const { page } = held.tab;
  await route(page, '#/requests', 'table#requests tr[data-request-id]');
  const options = await page.$$eval('select#status-filter option', (os) => os.map((o) => o.value));
  assert.deepEqual(options, ['', 'open', 'completed', 'failed', 'terminated', 'abandoned']);
  for (const status of ['terminated', 'completed', 'failed', 'open']) {
    await page.selectOption('select#status-filter', status);
    const got = await showsFirstPage(page, await apiAll('/v1/requests?status=' + status, token));
    assert.ok(got.every((r) => r.status === status));
    assert.match(new URL(page.url()).hash, new RegExp('^#/requests\\?(.*&)?status=' + status + '(&|$)'));
  }
  // The fill's own: terminated is one request, completed three.
  await page.selectOption('select#status-filter', 'terminated');
  await shows(page, [S.terminated.rid]);
  await page.selectOption('select#status-filter', 'completed');
  await shows(page, [S.zombie.rid, S.failover.rid, S.plain.rid]);
  await page.selectOption('select#status-filter', '');
  await showsFirstPage(page, await apiAll('/v1/requests', token));
});

test('the attention filter lists only the requests that need someone', async () => {
  const { page } = held.tab;
  await route(page, '#/requests', 'table#requests tr[data-request-id]');
  await page.check('input#attention-filter');
  const want = await apiAll('/v1/requests?attention=true', token);
  assert.ok(want.length >= 4);
  const got = await showsFirstPage(page, want);
  assert.equal(got.length, want.length);
  assert.ok(got.every((r) => r.badges.length > 0));
  for (const name of ['terminated', 'zombie', 'unknown', 'hostile']) {
    assert.ok(got.some((r) => r.id === S[name].rid), name);
  }
  for (const name of ['plain', 'failover']) assert.ok(!got.some((r) => r.id === S[name].rid), name);
  assert.match(new URL(page.url()).hash, /^#\/requests\?(.*&)?attention=1(&|$)/);
  // Both filters at once.
  await page.selectOption('select#status-filter', 'terminated');
  await shows(page, [S.terminated.rid]);
  await page.selectOption('select#status-filter', 'completed');
  await shows(page, [S.zombie.rid]);
  await page.selectOption('select#status-filter', '');
  await page.uncheck('input#attention-filter');
  await showsFirstPage(page, await apiAll('/v1/requests', token));
});

test('the route sets the filters: a link to #/requests?status=open&attention=1', async () => {
  const { page } = held.tab;
  await route(page, '#/requests?status=open&attention=1');
  const want = await apiAll('/v1/requests?status=open&attention=true', token);
  await showsFirstPage(page, want);
  assert.equal(await page.inputValue('select#status-filter'), 'open');
  assert.equal(await page.isChecked('input#attention-filter'), true);
  assert.ok(want.some((i) => i.request_id === S.unknown.rid));
  await route(page, '#/requests');
  await showsFirstPage(page, await apiAll('/v1/requests', token));
  assert.equal(await page.inputValue('select#status-filter'), '');
  assert.equal(await page.isChecked('input#attention-filter'), false);
});

test('nothing went wrong on the page', async () => {
  await checkWatch(held.tab);
});
