import js from "@eslint/js";
import tseslint from "typescript-eslint";
import reactHooks from "eslint-plugin-react-hooks";
import globals from "globals";

export default tseslint.config(
  { ignores: ["dist", "node_modules", "generated", "e2e/artifacts"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["src/**/*.{ts,tsx}"],
    languageOptions: { globals: globals.browser },
    plugins: { "react-hooks": reactHooks },
    rules: {
      ...reactHooks.configs.recommended.rules,
      // The loading hooks (src/pages/loading.ts, paging.tsx) take a request and what it depends
      // on, as useEffect does: their dependencies are checked the same way.
      "react-hooks/exhaustive-deps": ["warn", { additionalHooks: "^(useRequest|useDebouncedRequest|usePagedList)$" }],
    },
  },
  {
    files: ["e2e/**/*.mjs", "vite.config.ts", "eslint.config.js"],
    languageOptions: { globals: { ...globals.node, ...globals.browser } },
  },
);
