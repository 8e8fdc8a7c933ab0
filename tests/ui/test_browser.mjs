// Debian's chromium runs under playwright-core and reaches ledgerd: if this
// file fails, the others' failures say nothing about the page.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { config, launch } from './helpers.mjs';

test('chromium reaches ledgerd', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const health = await page.goto(config.url + '/healthz');
    assert.equal(health.status(), 200);
    const index = await page.goto(config.url + '/ui/');
    assert.equal(index.status(), 200);
    assert.match(await index.headerValue('content-type'), /^text\/html/);
  } finally {
    await browser.close();
  }
});
