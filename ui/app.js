// app.js: ledgerd's incident-review page: the token, the header, and the
// hash router that shows one of three views.
//
//   #/requests?status=S&attention=1   the tenant's requests (requests.js)
//   #/request/<id>                    one request's timeline (request.js)
//   #/unknown                         calls of unknown outcome (unknown.js)
//
// Nothing runs before a token is known: without one (or after a 401) the
// page shows only the token form. The hash never reaches the server.

import {clearError, forgetToken, get, getToken, onUnauthorized, setToken, showError} from "./api.js";
import {isId} from "./dom.js";
import {setupRequest, showRequest} from "./request.js";
import {parseFilters, setupRequests, showRequests} from "./requests.js";
import {setRole, setupUnknown, showUnknown} from "./unknown.js";

const VIEWS = ["view-token", "view-requests", "view-request", "view-unknown"];

let identity = null; // {tenant, role} of the token, once whoami answered

function showView(id) {
  for (const v of VIEWS) document.getElementById(v).hidden = v !== id;
  const section = id === "view-unknown" ? "#/unknown" : id === "view-token" ? "" : "#/requests";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.getAttribute("href") === section);
  }
}

function askForToken() {
  identity = null;
  setRole(null);
  document.getElementById("whoami").textContent = "";
  document.getElementById("forget-token").hidden = true;
  document.body.classList.add("signed-out");
  showView("view-token");
  const input = document.getElementById("token");
  input.value = "";
  input.focus();
}

// Who the token is; a 401 has already sent the page back to the form.
async function learnIdentity() {
  let who;
  try {
    who = await get("/v1/whoami");
  } catch (e) {
    if (e && e.status === 401) return false;
    who = {tenant: "?", role: "?"}; // ledgerd answered otherwise: read-only, as the least role
  }
  identity = {tenant: String(who.tenant), role: String(who.role)};
  document.getElementById("whoami").textContent = "tenant " + identity.tenant + " · role " + identity.role;
  document.getElementById("forget-token").hidden = false;
  document.body.classList.remove("signed-out");
  setRole(identity.role);
  return true;
}

/** Shows the view the hash names. */
function route() {
  if (!getToken() || !identity) return;
  const hash = location.hash || "";
  const [path, search] = hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(search || "");
  if (path.startsWith("/request/")) {
    let rid = null;
    try {
      rid = decodeURIComponent(path.slice("/request/".length));
    } catch {
      rid = null;
    }
    if (!isId(rid)) {
      showError("400 invalid_id: a request id is 1 to 128 of A-Z a-z 0-9 . _ ~ -");
      showView("view-requests");
      return;
    }
    showView("view-request");
    showRequest(rid);
    return;
  }
  if (path === "/unknown") {
    showView("view-unknown");
    showUnknown();
    return;
  }
  if (path !== "/requests") {
    location.replace("#/requests");
    return;
  }
  showView("view-requests");
  showRequests(parseFilters(params));
}

async function start() {
  if (await learnIdentity()) route();
}

function setup() {
  setupRequests();
  setupRequest();
  setupUnknown();
  onUnauthorized(askForToken);

  document.getElementById("token-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = document.getElementById("token").value.trim();
    if (token === "") return;
    clearError();
    setToken(token);
    document.getElementById("token").value = "";
    if (!location.hash || location.hash === "#") location.replace("#/requests");
    await start();
  });
  document.getElementById("forget-token").addEventListener("click", () => {
    forgetToken();
    clearError();
    askForToken();
  });
  window.addEventListener("hashchange", () => {
    clearError();
    route();
  });

  if (!location.hash || location.hash === "#" || location.hash === "#/") location.replace("#/requests");
  if (getToken()) start();
  else askForToken();
}

setup();
