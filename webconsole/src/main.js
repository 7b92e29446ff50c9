// The console's shell: login when there is no session, else the page the URL's hash names.
import { get, request } from "./api.js";
import { clearNotice, h } from "./dom.js";
import { loginPage } from "./login.js";
import { vmPage } from "./vm.js";
import { createPage } from "./create.js";
import { dataVolumesPage } from "./datavolumes.js";
import { nodesPage } from "./nodes.js";
import { scaledPage } from "./scaled.js";
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
  else if (parts[0] === "create") cleanup = createPage(main) || (() => {});
  else if (parts[0] === "nodes") cleanup = nodesPage(main);
  else if (parts[0] === "pools") cleanup = scaledPage(main);
  else if (parts[0] === "datavolumes") cleanup = dataVolumesPage(main);
  else cleanup = vmsPage(main);
  for (const link of document.querySelectorAll("header nav a")) {
    const current = link.getAttribute("href") === `#/${parts[0] === "vm" ? "" : parts[0] || ""}`;
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
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
