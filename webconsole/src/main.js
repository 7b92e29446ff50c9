// The console's shell: login when there is no session, else the page the URL's hash names.
import { get, request } from "./api.js";
import { clearNotice, h } from "./dom.js";
import { loginPage } from "./login.js";
import { vmPage } from "./vm.js";
import { vmsPage } from "./vms.js";

const main = document.getElementById("main");
const user = document.getElementById("user");
let cleanup = () => {};
let username = null;

function route() {
  cleanup();
  cleanup = () => {};
  clearNotice();
  if (username === null) {
    user.replaceChildren();
    loginPage(main, (name) => {
      username = name || "(token)";
      route();
    });
    return;
  }
  user.replaceChildren(
    h("span", {}, username),
    h("button", { type: "button", onclick: logout }, "Log out"),
  );
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "vm" && parts.length >= 3) cleanup = vmPage(main, parts[1], parts[2], parts[3]);
  else cleanup = vmsPage(main);
  main.focus();
}

async function logout() {
  await request("POST", "/console/logout").catch(() => {});
  username = null;
  route();
}

window.addEventListener("hashchange", route);
window.addEventListener("console:logged-out", () => {
  if (username !== null) {
    username = null;
    route();
  }
});

get("/console/whoami")
  .then((who) => (username = who.username || "(token)"))
  .catch(() => (username = null))
  .finally(route);
