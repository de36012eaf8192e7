import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Served by `herald serve` at /app/ (host/src/api/dashboard.rs embeds dist/). In development,
// `npm run dev` proxies the API to a herald on HERALD_URL (default http://127.0.0.1:8080).
const api = process.env.HERALD_URL ?? "http://127.0.0.1:8080";
const proxied = ["/auth", "/users", "/projects", "/contacts", "/events"];

export default defineConfig({
  base: "/app/",
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // The CSP forbids inline scripts: no module-preload polyfill, nothing inlined as data: URLs.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
  server: { proxy: Object.fromEntries(proxied.map((p) => [p, api])) },
});
