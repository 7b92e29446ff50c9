// The login page: the bearer token is sent once to the console, which keeps it in its session (never in a URL).
import { request } from "./api.js";
import { h } from "./dom.js";

export function loginPage(root, onLoggedIn) {
  const error = h("p", { id: "login-error", className: "form-error", role: "alert" });
  const token = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    required: true,
    "aria-describedby": "token-help login-error",
  });
  const form = h(
    "form",
    { className: "login", onsubmit: submit },
    h("h1", {}, "pykubevirt"),
    h("label", { for: "token" }, "Bearer token"),
    token,
    h(
      "p",
      { id: "token-help", className: "help" },
      "The token of your kubeconfig: ",
      h("code", {}, "kubectl config view --raw -o jsonpath='{.users[0].user.token}'"),
    ),
    h("button", { type: "submit" }, "Log in"),
    error,
  );
  root.replaceChildren(form);
  token.focus();

  async function submit(event) {
    event.preventDefault();
    error.textContent = "";
    try {
      const who = await request("POST", "/console/login", { token: token.value });
      onLoggedIn(who.username);
    } catch (failure) {
      error.textContent = failure.message;
    }
  }
}
