// api.js: the page's only way to ledgerd's API, and where the token lives.
//
// The token is kept in sessionStorage (gone with the tab), sent only as
// "Authorization: Bearer" to this origin, never in a URL or a cookie. A 401
// means ledgerd does not know the token (any more): it is forgotten and the
// page asks for one again. Every error is shown in #error as
// "STATUS code: message", the error envelope's own words.

const TOKEN_KEY = "ledgerd.token";

let unauthorizedHandler = () => {};
let clockSkewMs = 0;

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(status + " " + code + ": " + message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null; // storage refused (privacy settings): the page asks each time
  }
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing stored, nothing to forget
  }
}

/** Called (once per 401) after the token was forgotten. */
export function onUnauthorized(handler) {
  unauthorizedHandler = handler;
}

export function showError(text) {
  const banner = document.getElementById("error");
  banner.textContent = text;
  banner.hidden = false;
}

export function clearError() {
  const banner = document.getElementById("error");
  banner.textContent = "";
  banner.hidden = true;
}

/**
 * ledgerd's clock as this browser sees it. Leases and "still open" bars run
 * to the database's now; a browser whose clock is off by more than the Date
 * header's one-second grain would otherwise draw them too short or too long.
 */
export function serverNow() {
  return Date.now() + clockSkewMs;
}

function learnSkew(response) {
  const date = Date.parse(response.headers.get("Date") || "");
  if (!Number.isFinite(date)) return;
  const skew = date - Date.now();
  clockSkewMs = Math.abs(skew) > 1500 ? skew : 0;
}

/**
 * Sends one call; resolves to {status, body} whatever the status (body is
 * the parsed JSON, or null). Rejects only when ledgerd could not be reached.
 */
export async function send(method, path, body) {
  const headers = {Accept: "application/json"};
  const token = getToken();
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
      redirect: "error",
    });
  } catch (e) {
    showError("0 unreachable: " + (e && e.message ? e.message : "ledgerd did not answer"));
    throw new ApiError(0, "unreachable", "ledgerd did not answer", null);
  }
  learnSkew(response);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text === "" ? null : JSON.parse(text);
  } catch {
    parsed = null; // not JSON (a proxy's page, say): the status still tells
  }
  if (response.status >= 400) report(response.status, parsed, text);
  return {status: response.status, body: parsed};
}

function errorParts(status, parsed, text) {
  const e = parsed && typeof parsed === "object" && parsed.error ? parsed.error : {};
  const code = typeof e.code === "string" ? e.code : "error";
  const message = typeof e.message === "string" ? e.message : text.slice(0, 200);
  return {code, message};
}

function report(status, parsed, text) {
  const {code, message} = errorParts(status, parsed, text);
  showError(status + " " + code + ": " + message);
  if (status === 401) {
    forgetToken();
    unauthorizedHandler();
  }
}

/** A GET that must succeed: resolves to the body, rejects with an ApiError. */
export async function get(path) {
  const {status, body} = await send("GET", path);
  if (status >= 400) {
    const {code, message} = errorParts(status, body, "");
    throw new ApiError(status, code, message, body);
  }
  return body;
}

/** A query string of the set parameters (empty values left out). */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s === "" ? "" : "?" + s;
}

export function requestPath(rid) {
  return "/v1/requests/" + encodeURIComponent(rid);
}
