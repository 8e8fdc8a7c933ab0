// The request view (#/request/<id>) of every scenario: the summary, the
// timeline's lanes and marks, the tool-call and events tables, each read
// against GET /v1/requests/{id} and what the fill did.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { S, TIME, TIME_IN, api, checkWatch, config, isEmpty, poll, route, shot, signedInTab } from './helpers.mjs';

const token = config.tokens.reviewer;
const held = signedInTab('reviewer');

// Everything the view shows, read in the page.
function readView() {
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return { x: r.x, y: r.y, w: r.width, h: r.height, cy: r.y + r.height / 2 };
  };
  const title = (el) => {
    const t = [...el.children].find((c) => c.tagName.toLowerCase() === 'title');
    return t ? t.textContent : null;
  };
  const all = (sel, f) => [...document.querySelectorAll(sel)].map(f);
  const cells = (tr, names) => Object.fromEntries(names.map((n) => [n, tr.querySelector('.' + n)?.textContent ?? null]));
  return {
    title: document.querySelector('h2#request-title')?.textContent.trim(),
    summary: Object.fromEntries(all('dl#request-summary dd[data-field]', (dd) => [dd.getAttribute('data-field'), dd.textContent.trim()])),
    lanes: all('svg#timeline g.lane', (g) => {
      const lease = g.querySelector('rect.lease');
      const label = g.querySelector('text.lane-label');
      return {
        id: g.getAttribute('data-attempt-id'),
        label: label ? label.textContent : null,
        labelShown: label ? [...label.childNodes].filter((n) => n.nodeName.toLowerCase() !== 'title').map((n) => n.textContent).join(' ') : null,
        labelBox: label ? box(label) : null,
        lease: lease ? { state: lease.getAttribute('data-state'), box: box(lease), title: title(lease) } : null,
      };
    }),
    fenced: all('svg#timeline line.mark-fenced', (el) => ({ attempt: el.getAttribute('data-attempt-id'), cause: el.getAttribute('data-cause'), box: box(el), title: title(el) })),
    firstDelta: all('svg#timeline line.mark-first-delta', (el) => ({ attempt: el.getAttribute('data-attempt-id'), tokens: el.getAttribute('data-tokens'), box: box(el), title: title(el) })),
    bars: all('svg#timeline rect.tool-call', (el) => ({ call: el.getAttribute('data-tool-call-id'), attempt: el.getAttribute('data-attempt-id'), state: el.getAttribute('data-state'), box: box(el), title: title(el) })),
    refused: all('svg#timeline circle.mark-refused', (el) => ({ operation: el.getAttribute('data-operation'), code: el.getAttribute('data-code'), box: box(el), title: title(el) })),
    late: all('svg#timeline circle.mark-late-completion', (el) => ({ call: el.getAttribute('data-tool-call-id'), box: box(el), title: title(el) })),
    failovers: all('svg#timeline path.mark-failover', (el) => ({ signal: el.getAttribute('data-signal'), action: el.getAttribute('data-action'), box: box(el), title: title(el) })),
    client: all('svg#timeline path.mark-client', (el) => ({ type: el.getAttribute('data-type'), attempt: el.getAttribute('data-attempt-id'), box: box(el), title: title(el) })),
    axis: all('svg#timeline text.axis-label', (el) => el.textContent.trim()),
    attemptRows: all('table#attempts tr[data-attempt-id]', (tr) => ({ id: tr.getAttribute('data-attempt-id'), ...cells(tr, ['replica', 'gateway', 'state']) })),
    toolCalls: all('table#tool-calls tr[data-tool-call-id]', (tr) => ({ id: tr.getAttribute('data-tool-call-id'), ...cells(tr, ['tool', 'state', 'attempt', 'owner', 'fencing-token', 'outcome']) })),
    events: all('table#events tr[data-seq]', (tr) => ({ seq: tr.getAttribute('data-seq'), ...cells(tr, ['at', 'type', 'attempt', 'tool-call', 'detail']) })),
  };
}

// Opens the request @rid and waits until the view shows all of it.
async function openRequest(page, rid) {
  const history = await api('/v1/requests/' + rid, token);
  await route(page, '#/request/' + encodeURIComponent(rid));
  const view = await poll(async () => {
    const v = await page.evaluate(readView);
    assert.equal(v.title, rid);
    assert.equal(v.events.length, history.events.length);
    assert.equal(v.events[0].seq, String(history.events[0].seq));
    return v;
  });
  assert.equal(await page.isVisible('#view-request'), true);
  return { history, view };
}

// The lane nearest to a mark's vertical middle.
function nearestLane(view, box) {
  let best = null;
  for (const lane of view.lanes) {
    const ref = lane.lease ? lane.lease.box : lane.labelBox;
    const d = Math.abs(ref.cy - box.cy);
    if (best === null || d < best.d) best = { id: lane.id, d };
  }
  return best.id;
}

function titled(mark, what, at) {
  assert.ok(mark.title && mark.title.trim().length > 0, `${what}: no <title>`);
  assert.match(mark.title, TIME_IN, `${what}: no time in its title`);
  if (at) assert.ok(mark.title.includes(at), `${what}: title ${JSON.stringify(mark.title)} lacks ${at}`);
}

// Every check the contract and the API allow, for any request.
function checkView(name, want, { history, view }) {
  const { request, attempts, tool_calls: calls, events } = history;
  const of = (type) => events.filter((e) => e.type === type);

  // The summary.
  const sum = view.summary;
  for (const f of ['status', 'phase', 'delivered_output_tokens', 'attempts', 'max_attempts', 'created_at']) {
    assert.equal(sum[f], String(request[f]), `${name}: summary ${f}`);
  }
  assert.match(sum.created_at, TIME);
  assert.match(sum.first_delta_sent, request.first_delta_sent ? /^(true|yes)$/i : /^(false|no)$/i, `${name}: first_delta_sent`);
  if (request.model_revision === null) assert.ok(isEmpty(sum.model_revision), `${name}: model_revision`);
  else assert.equal(sum.model_revision, request.model_revision, `${name}: model_revision`);
  if (request.client_error) assert.equal(sum.client_error, request.client_error.error.code, `${name}: client_error`);
  else assert.ok(isEmpty(sum.client_error), `${name}: client_error ${sum.client_error}`);

  // Lanes: the attempts in epoch order, and the no-attempt lane iff a call was claimed under none.
  const byEpoch = [...attempts].sort((a, b) => a.epoch - b.epoch);
  const laneIds = view.lanes.map((l) => l.id);
  assert.deepEqual(laneIds.filter((id) => id !== ''), byEpoch.map((a) => a.attempt_id), `${name}: lanes`);
  const noAttempt = of('claimed').some((e) => !e.attempt_id) || of('refused').some((e) => !e.attempt_id);
  assert.equal(laneIds.filter((id) => id === '').length, noAttempt ? 1 : 0, `${name}: the no-attempt lane`);
  assert.deepEqual([...laneIds].sort(), [...want.lanes].sort(), `${name}: the fill's lanes`);
  for (const a of byEpoch) {
    const lane = view.lanes.find((l) => l.id === a.attempt_id);
    // What the label shows (its <title> aside): a long replica may be cut short, with an ellipsis.
    const shown = lane.labelShown;
    assert.ok(shown.includes(a.attempt_id), `${name}: label ${shown}`);
    assert.ok(shown.includes(a.replica) || [...Array(a.replica.length).keys()].some((n) => n >= 8 &&
      shown.includes(a.replica.slice(0, n) + '…')), `${name}: label ${shown} lacks ${a.replica}`);
    assert.match(shown, new RegExp(`\\bepoch ${a.epoch}\\b`), `${name}: label ${shown}`);
    assert.ok(lane.label.includes(a.replica), `${name}: label ${lane.label} lacks ${a.replica} even in full`);
    // The gateway that ran it (API 1.1), when one did.
    if (a.gateway) assert.ok(shown.includes('via ' + a.gateway), `${name}: label ${shown} lacks gateway ${a.gateway}`);
    else assert.ok(!shown.includes('via '), `${name}: label ${shown} names a gateway`);
    if (want.gateways) assert.equal(a.gateway, want.gateways[a.attempt_id], `${name}: ${a.attempt_id}'s gateway`);
    assert.ok(lane.lease, `${name}: ${a.attempt_id} has no rect.lease`);
    assert.equal(lane.lease.state, a.state, `${name}: ${a.attempt_id}'s lease state`);
    assert.ok(lane.lease.box.w > 0, `${name}: ${a.attempt_id}'s lease has no width`);
  }
  // Later attempts start no earlier on the axis.
  for (let i = 1; i < byEpoch.length; i++) {
    const [p, q] = [byEpoch[i - 1], byEpoch[i]].map((a) => view.lanes.find((l) => l.id === a.attempt_id).lease.box);
    assert.ok(q.x >= p.x - 0.5, `${name}: attempt ${i + 1} starts before attempt ${i}`);
  }
  assert.ok(view.axis.length >= 2 && view.axis.every((t) => t.length > 0), `${name}: axis labels ${view.axis}`);

  // The first delta: where the API says, with the tokens of that moment, or none.
  const fd = of('first_delta');
  assert.equal(view.firstDelta.length, fd.length, `${name}: first-delta marks`);
  assert.equal(fd[0]?.attempt_id ?? null, want.first_delta, `${name}: the fill's first delta`);
  if (fd.length) {
    const [mark] = view.firstDelta;
    assert.equal(mark.attempt, fd[0].attempt_id);
    assert.equal(mark.tokens, String(fd[0].detail.delivered_output_tokens));
    if (want.first_delta_tokens !== undefined) assert.equal(mark.tokens, String(want.first_delta_tokens));
    const lease = view.lanes.find((l) => l.id === mark.attempt).lease.box;
    const x = mark.box.x + mark.box.w / 2;
    assert.ok(x >= lease.x - 1 && x <= lease.x + lease.w + 1, `${name}: the first delta is outside its attempt's lease`);
    titled(mark, `${name} first delta`, fd[0].at);
  }

  // Fenced: the attempts that lost their rights, each with a cause the history gives.
  const revoked = of('attempt_revoked');
  for (const mark of view.fenced) {
    const causes = revoked.filter((e) => e.attempt_id === mark.attempt).map((e) => e.detail.cause);
    assert.ok(causes.length > 0 || attempts.find((a) => a.attempt_id === mark.attempt)?.state === 'cancel_requested' ||
      of('attempt_cancelled').some((e) => e.attempt_id === mark.attempt), `${name}: ${mark.attempt} marked fenced`);
    if (causes.length) assert.ok(causes.includes(mark.cause), `${name}: cause ${mark.cause} not in ${causes}`);
    titled(mark, `${name} fenced ${mark.attempt}`);
  }
  for (const e of revoked) assert.ok(view.fenced.some((m) => m.attempt === e.attempt_id), `${name}: ${e.attempt_id}'s revocation unmarked`);
  if (want.fenced !== null) {
    assert.deepEqual([...new Set(view.fenced.map((m) => m.attempt))].sort(), [...want.fenced].sort(), `${name}: fenced attempts`);
  }

  // Tool-call bars: one per holder (claimed event), on its holder's lane, in the call's state.
  const claims = of('claimed');
  const key = (attempt, call) => `${attempt}|${call}`;
  assert.deepEqual(view.bars.map((b) => key(b.attempt, b.call)).sort(),
    claims.map((e) => key(e.attempt_id ?? '', e.tool_call_id)).sort(), `${name}: bars`);
  for (const [call, attempt] of Object.entries(want.calls)) {
    assert.ok(view.bars.some((b) => b.call === call && b.attempt === attempt), `${name}: no bar of ${call} on ${attempt || 'no attempt'}`);
  }
  for (const bar of view.bars) {
    const c = calls.find((x) => x.tool_call_id === bar.call);
    if (claims.filter((e) => e.tool_call_id === bar.call).length === 1) {
      // The call's state; a holding an operator ended shows what it was then.
      const taken = of('resolved').find((e) => e.tool_call_id === bar.call);
      if (taken && bar.state !== c.state) assert.equal(bar.state, taken.detail.previous_state, `${name}: ${bar.call}'s bar`);
      else assert.equal(bar.state, c.state, `${name}: ${bar.call}'s bar`);
    }
    assert.equal(nearestLane(view, bar.box), bar.attempt, `${name}: ${bar.call}'s bar on another lane`);
    assert.ok(bar.box.w > 0 && bar.box.h > 0, `${name}: ${bar.call}'s bar is not drawn`);
    const claimedAt = claims.filter((e) => e.tool_call_id === bar.call && (e.attempt_id ?? '') === bar.attempt).map((e) => e.at);
    assert.ok(claimedAt.some((at) => bar.title?.includes(at)), `${name}: ${bar.call}'s bar title ${bar.title} lacks its claim time`);
  }

  // Refusals, on the refused attempt's lane.
  const refusals = of('refused');
  assert.deepEqual(view.refused.map((r) => [r.operation, r.code]), refusals.map((e) => [e.detail.operation, e.detail.code]), `${name}: refused`);
  assert.deepEqual(refusals.map((e) => [e.attempt_id ?? '', e.detail.operation, e.detail.code]), want.refused ?? [], `${name}: the fill's refusals`);
  view.refused.forEach((mark, i) => {
    assert.equal(nearestLane(view, mark.box), refusals[i].attempt_id ?? '', `${name}: refusal on another lane`);
    titled(mark, `${name} refusal`, refusals[i].at);
  });

  // Late completions.
  const lates = of('late_completion');
  assert.deepEqual(view.late.map((m) => m.call), lates.map((e) => e.tool_call_id), `${name}: late completions`);
  assert.deepEqual(view.late.map((m) => m.call), want.late ?? [], `${name}: the fill's late completions`);
  view.late.forEach((mark, i) => {
    assert.equal(nearestLane(view, mark.box), lates[i].attempt_id ?? '', `${name}: late completion on another lane`);
    titled(mark, `${name} late completion`, lates[i].at);
  });

  // Failover decisions, with their signal and action.
  const decisions = of('failover_decision');
  assert.deepEqual(view.failovers.map((m) => [m.signal, m.action]), decisions.map((e) => [e.detail.signal, e.detail.action]), `${name}: failovers`);
  assert.deepEqual(view.failovers.map((m) => [m.signal, m.action]), want.failovers ?? [], `${name}: the fill's failovers`);
  view.failovers.forEach((mark, i) => titled(mark, `${name} failover`, decisions[i].at));

  // Client events a gateway reported, on their attempt's lane.
  const clientEvents = events.filter((e) => e.type.startsWith('client_'));
  assert.deepEqual(view.client.map((m) => [m.attempt, m.type]), clientEvents.map((e) => [e.attempt_id, e.type]), `${name}: client events`);
  assert.deepEqual(view.client.map((m) => [m.attempt, m.type]), want.client ?? [], `${name}: the fill's client events`);
  view.client.forEach((mark, i) => {
    assert.equal(nearestLane(view, mark.box), clientEvents[i].attempt_id, `${name}: client event on another lane`);
    titled(mark, `${name} client event`, clientEvents[i].at);
  });

  // The attempts table: one row per attempt, with the gateway that ran it (empty: none).
  assert.deepEqual(view.attemptRows.map((r) => r.id), byEpoch.map((a) => a.attempt_id), `${name}: attempt rows`);
  for (const a of byEpoch) {
    const row = view.attemptRows.find((r) => r.id === a.attempt_id);
    assert.equal(row.gateway, a.gateway ?? '', `${name}: ${a.attempt_id}'s gateway cell`);
  }

  // The tool-call table: one row per call.
  assert.deepEqual(view.toolCalls.map((r) => r.id).sort(), calls.map((c) => c.tool_call_id).sort(), `${name}: tool-call rows`);
  for (const c of calls) {
    const row = view.toolCalls.find((r) => r.id === c.tool_call_id);
    const last = claims.filter((e) => e.tool_call_id === c.tool_call_id).at(-1);
    assert.equal(row.tool, c.tool, `${name}: ${c.tool_call_id} tool`);
    assert.equal(row.state, c.state, `${name}: ${c.tool_call_id} state`);
    assert.equal(row['fencing-token'].trim(), String(c.fencing_token), `${name}: ${c.tool_call_id} token`);
    if (c.outcome) assert.equal(row.outcome.trim(), c.outcome, `${name}: ${c.tool_call_id} outcome`);
    else assert.ok(isEmpty(row.outcome), `${name}: ${c.tool_call_id} outcome ${row.outcome}`);
    if (c.holder) {
      assert.equal(row.attempt.trim(), c.holder.attempt_id ?? '', `${name}: ${c.tool_call_id} attempt`);
      assert.equal(row.owner, c.holder.owner, `${name}: ${c.tool_call_id} owner`);
    } else {
      assert.ok(isEmpty(row.attempt) || row.attempt.trim() === (last?.attempt_id ?? ''), `${name}: ${c.tool_call_id} attempt ${row.attempt}`);
      assert.ok(isEmpty(row.owner) || row.owner === last?.detail.owner, `${name}: ${c.tool_call_id} owner ${row.owner}`);
    }
  }

  // The events table: the API's events, in order, times as the API gives them.
  assert.deepEqual(view.events.map((r) => r.seq), events.map((e) => String(e.seq)), `${name}: event rows`);
  events.forEach((e, i) => {
    const row = view.events[i];
    assert.equal(row.at, e.at, `${name}: event ${e.seq} time`);
    assert.match(row.at, TIME);
    assert.equal(row.type, e.type, `${name}: event ${e.seq} type`);
    if (e.attempt_id) assert.equal(row.attempt.trim(), e.attempt_id);
    else assert.ok(isEmpty(row.attempt), `${name}: event ${e.seq} attempt ${row.attempt}`);
    if (e.tool_call_id) assert.equal(row['tool-call'].trim(), e.tool_call_id);
    else assert.ok(isEmpty(row['tool-call']), `${name}: event ${e.seq} tool call ${row['tool-call']}`);
    assert.deepEqual(JSON.parse(row.detail), e.detail, `${name}: event ${e.seq} detail`);
    assert.equal(row.detail, JSON.stringify(e.detail), `${name}: event ${e.seq} detail is not compact JSON`);
  });
}

for (const name of ['plain', 'failover', 'terminated', 'zombie', 'unknown', 'resolve', 'hostile', 'gateway']) {
  test(`the request view of ${name}`, async () => {
    const shown = await openRequest(held.tab.page, S[name].rid);
    checkView(name, S[name], shown);
    if (name === 'failover' || name === 'zombie' || name === 'gateway') {
      await held.tab.page.screenshot({ path: shot(`request-${name}.png`), fullPage: true });
      // What the README shows: the first screen of the view, its timeline whole.
      await held.tab.page.screenshot({ path: shot(`request-${name}-top.png`) });
    }
  });
}

test('the request view of a request made by a claim alone: the no-attempt lane', async () => {
  const rid = S.extra[0];
  const shown = await openRequest(held.tab.page, rid);
  checkView('extra', { lanes: [''], first_delta: null, fenced: [], calls: { call_01: '' } }, shown);
  const [lane] = shown.view.lanes;
  assert.ok(lane.label && lane.label.trim().length > 0);
});

test('a request that does not exist shows the API error', async () => {
  const { page } = held.tab;
  await route(page, '#/request/no-such-request');
  await poll(async () => assert.match(await page.textContent('#error'), /^404 not_found: /));
  assert.equal(await page.isVisible('#error'), true);
});

test('nothing went wrong on the page', async () => {
  // The 404 above is the one failed load the browser reports.
  await checkWatch(held.tab, { error: true, console: [/^error: Failed to load resource: the server responded with a status of 404 \(Not Found\) @ http:\/\/[^/]+\/v1\/requests\/no-such-request$/] });
});
