// timescale.js: the timeline's time axis: milliseconds to pixels and back.
//
// An incident is bursts of events a few ms apart separated by waits for a
// lease or a heartbeat (hundreds of ms, or minutes until now): on one
// linear axis every burst shrinks to a pixel. So by default each long idle
// gap between two moments of interest becomes a break of fixed width,
// marked on the axis with how long it lasted, and the bursts share the rest
// linearly. "Linear" and a zoom window give true proportions instead.
//
//   |--linear--|/ 452 ms /|--linear--|/ 2 min /|
//   lo        a+m       b-m                    hi

export const BREAK_W = 56;   // pixels of one break
const MAX_BREAKS = 6;        // the longest gaps only: past that the axis tells nothing
const MIN_GAP_MS = 50;       // a shorter gap is never worth a break

/**
 * A scale for moments @points (ms) from @tMin to @tEnd onto x0..x1.
 * @zoom {lo, hi} shows that window linearly; @linear asks for no breaks;
 * @openEnd says @tEnd is now, not a moment of the history.
 * Returns f(t) -> px with f.invert(px) -> t, f.segments, f.perMs.
 */
export function makeScale({points, tMin, tEnd, x0, x1, zoom, linear, openEnd}) {
  const segments = zoom ? [{t0: zoom.lo, t1: zoom.hi, gap: false}]
    : buildSegments(points, tMin, tEnd, !!linear, !!openEnd);
  const breaks = segments.filter((s) => s.gap).length;
  const linearMs = segments.reduce((n, s) => n + (s.gap ? 0 : s.t1 - s.t0), 0);
  const perMs = (x1 - x0 - breaks * BREAK_W) / Math.max(linearMs, 1e-6);
  let px = x0;
  for (const s of segments) {
    s.x0 = px;
    px += s.gap ? BREAK_W : (s.t1 - s.t0) * perMs;
    s.x1 = px;
  }
  const first = segments[0];
  const last = segments[segments.length - 1];

  const f = (t) => {
    if (t <= first.t0) return first.x0 - (first.t0 - t) * perMs;
    if (t >= last.t1) return last.x1 + (t - last.t1) * perMs;
    const s = segments.find((seg) => t <= seg.t1);
    return s.x0 + ((t - s.t0) / Math.max(s.t1 - s.t0, 1e-9)) * (s.x1 - s.x0);
  };
  f.invert = (p) => {
    if (p <= first.x0) return first.t0 - (first.x0 - p) / perMs;
    if (p >= last.x1) return last.t1 + (p - last.x1) / perMs;
    const s = segments.find((seg) => p <= seg.x1);
    return s.t0 + ((p - s.x0) / Math.max(s.x1 - s.x0, 1e-9)) * (s.t1 - s.t0);
  };
  Object.assign(f, {segments, perMs, x0, x1, lo: first.t0, hi: last.t1, zoomed: !!zoom});
  return f;
}

// The gaps longer than a fifth of the span (and MIN_GAP_MS) become breaks,
// each keeping a little linear air on both sides so the moments next to it
// do not sit on its edge.
function buildSegments(points, tMin, tEnd, linear, openEnd) {
  const span = Math.max(tEnd - tMin, 10);
  const pts = [...new Set(points.filter((t) => Number.isFinite(t) && t >= tMin && t <= tEnd)
    .concat([tMin, tEnd]))].sort((a, b) => a - b);
  const gaps = [];
  for (let i = 1; i < pts.length && !linear; i++) {
    const g = pts[i] - pts[i - 1];
    if (g > Math.max(span * 0.2, MIN_GAP_MS)) gaps.push({a: pts[i - 1], b: pts[i], g});
  }
  const chosen = gaps.sort((p, q) => q.g - p.g).slice(0, MAX_BREAKS).sort((p, q) => p.a - q.a);
  const kept = span - chosen.reduce((n, c) => n + c.g, 0); // the ms shown linearly
  const pad = Math.max(kept * 0.02, span < 20 ? 1 : 0.5);
  const segments = [];
  let from = tMin - pad;
  for (const c of chosen) {
    const air = Math.min(c.g / 4, Math.max(kept * 0.03, 1));
    // A wait that lasts until now (the request is still open) ends the
    // axis itself: nothing after it needs room.
    const toEnd = openEnd && c.b === tEnd;
    segments.push({t0: from, t1: c.a + air, gap: false});
    segments.push({t0: c.a + air, t1: toEnd ? tEnd : c.b - air, gap: true, toEnd});
    from = toEnd ? NaN : c.b - air;
  }
  if (!Number.isNaN(from)) segments.push({t0: from, t1: tEnd + pad, gap: false});
  return segments;
}
