// The unknown-outcome view (#/unknown) and the resolve flow: an admin
// settles a call from the page, end to end; a reviewer never gets the form.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { S, TIME, api, apiAll, checkWatch, config, launch, login, openPage, poll, route, shot } from './helpers.mjs';

const admin = config.tokens.admin;
const target = `${S.resolve.rid}:call_01`;
const RESULT = { message_id: 'm-ui-1', folder: 'sent' };
const NOTE = 'found in the mail log';
let browser;

before(async () => {
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

async function rows(page) {
  return page.$$eval('table#unknown tr[data-key]', (trs) => trs.map((tr) => {
    const cell = (c) => tr.querySelector('.' + c)?.textContent.trim() ?? null;
    const link = tr.querySelector('.request a');
    return {
      key: tr.getAttribute('data-key'),
      request: cell('request'),
      href: link?.getAttribute('href') ?? null,
      toolCall: cell('tool-call'),
      tool: cell('tool'),
      attempt: cell('attempt'),
      owner: cell('owner'),
      createdAt: cell('created-at'),
      buttons: tr.querySelectorAll('button.resolve-open').length,
    };
  }));
}

// Waits until the view lists exactly the API's unknown calls; returns the rows.
async function showsUnknown(page) {
  return poll(async () => {
    const want = await apiAll('/v1/tool-calls?state=unknown', admin);
    const got = await rows(page);
    assert.deepEqual(got.map((r) => r.key).sort(), want.map((c) => `${c.request_id}:${c.tool_call_id}`).sort());
    for (const c of want) {
      const row = got.find((r) => r.key === `${c.request_id}:${c.tool_call_id}`);
      assert.equal(row.request, c.request_id);
      assert.equal(row.href, '#/request/' + encodeURIComponent(c.request_id));
      assert.equal(row.toolCall, c.tool_call_id);
      assert.equal(row.tool, c.tool);
      assert.equal(row.attempt, c.holder.attempt_id ?? '');
      assert.equal(row.owner, c.holder.owner);
      assert.equal(row.createdAt, c.created_at);
      assert.match(row.createdAt, TIME);
    }
    return got;
  });
}

test('a reviewer sees the unknown calls and neither the resolve buttons nor the form', async () => {
  const tab = await openPage(browser);
  const { page } = tab;
  await login(page, config.tokens.reviewer, 'reviewer');
  await page.click('nav a[href="#/unknown"]');
  await page.locator('#view-unknown').waitFor({ state: 'visible' });
  const got = await showsUnknown(page);
  assert.ok(got.some((r) => r.key === target));
  assert.equal(await page.locator('form#resolve-form').count(), 0);
  assert.equal(await page.locator('button.resolve-open').count(), 0);
  assert.ok(got.every((r) => r.buttons === 0));
  await checkWatch(tab);
});

test('an admin resolves an unknown call from the page', async () => {
  const tab = await openPage(browser);
  const { page } = tab;
  await login(page, admin, 'admin');
  await page.click('nav a[href="#/unknown"]');
  await page.locator('#view-unknown').waitFor({ state: 'visible' });
  const before = await showsUnknown(page);
  assert.deepEqual(before.map((r) => r.key).sort(), [target, `${S.unknown.rid}:call_01`, `${S.hostile.rid}:call_02`].sort());
  assert.ok(before.every((r) => r.buttons === 1), 'a row without its resolve button');

  // Open the form on the target's row.
  await page.click(`table#unknown tr[data-key="${target}"] button.resolve-open`);
  const form = page.locator('form#resolve-form');
  await form.waitFor({ state: 'visible' });
  assert.deepEqual(await form.locator('select[name=resolution] option').evaluateAll((os) => os.map((o) => o.value)),
    ['succeeded', 'failed', 'not_executed']);
  // not_executed takes no result.
  await form.locator('select[name=resolution]').selectOption('not_executed');
  assert.equal(await form.locator('textarea[name=result]').isDisabled(), true);
  await form.locator('select[name=resolution]').selectOption('succeeded');
  assert.equal(await form.locator('textarea[name=result]').isDisabled(), false);
  await form.locator('textarea[name=result]').fill(JSON.stringify(RESULT));
  await form.locator('input[name=note]').fill(NOTE);
  await page.screenshot({ path: shot('unknown.png'), fullPage: true });

  // Submit: the answer is the API's.
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' &&
      r.url() === `${config.url}/v1/requests/${S.resolve.rid}/tool-calls/call_01/resolve`),
    form.locator('[type=submit], button:not([type=button])').first().click(),
  ]);
  assert.equal(answer.status(), 200);
  const sent = answer.request().postDataJSON();
  assert.deepEqual(sent, { resolution: 'succeeded', result: RESULT, note: NOTE });
  assert.equal(answer.request().headers().authorization, 'Bearer ' + admin);
  const body = await answer.json();
  assert.equal(body.status, 'completed');
  await poll(async () => {
    const text = await page.textContent('#resolve-answer');
    assert.match(text, /\b200\b/);
    assert.ok(text.includes('completed') && text.includes(RESULT.message_id), text);
  });

  // The call leaves the list; the other unknown calls stay.
  const after = await showsUnknown(page);
  assert.deepEqual(after.map((r) => r.key).sort(), before.map((r) => r.key).filter((k) => k !== target).sort());

  // The API confirms it.
  const call = await api(`/v1/requests/${S.resolve.rid}/tool-calls/call_01`, admin);
  assert.equal(call.state, 'succeeded');
  assert.equal(call.outcome, 'succeeded');
  assert.deepEqual(call.result, RESULT);

  // The request view tells it: a resolved event, the bar in its new state.
  await route(page, '#/request/' + S.resolve.rid);
  const history = await api('/v1/requests/' + S.resolve.rid, admin);
  const resolved = history.events.filter((e) => e.type === 'resolved');
  assert.equal(resolved.length, 1);
  await poll(async () => {
    assert.equal(await page.textContent('h2#request-title'), S.resolve.rid);
    const row = page.locator(`table#events tr[data-seq="${resolved[0].seq}"]`);
    assert.equal(await row.locator('.type').textContent(), 'resolved');
    const detail = JSON.parse(await row.locator('.detail').textContent());
    assert.equal(detail.resolution, 'succeeded');
    assert.equal(detail.note, NOTE);
    // The bar ends at the resolution: in the call's new state, or in the one the operator took it from.
    assert.ok(['succeeded', 'unknown'].includes(await page.getAttribute('svg#timeline rect.tool-call[data-tool-call-id="call_01"]', 'data-state')));
    assert.equal(await page.textContent('table#tool-calls tr[data-tool-call-id="call_01"] .state'), 'succeeded');
  });

  // And the list no longer asks for attention on it.
  await route(page, '#/requests');
  await poll(async () => {
    const badges = await page.$$eval(`table#requests tr[data-request-id="${S.resolve.rid}"] .attention span.badge[data-reason]`,
      (bs) => bs.map((b) => b.getAttribute('data-reason')));
    assert.deepEqual(badges, []);
    assert.equal(await page.locator(`table#requests tr[data-request-id="${S.resolve.rid}"]`).count(), 1);
  });
  await checkWatch(tab);
});
