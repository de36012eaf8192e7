// A CodeMirror editor for a template's HTML body, with the variables completed inside `{{`.
// It lives in a shadow root, where its styles go through CSSOM (constructed style sheets), which
// the strict CSP allows; the page's own styles do not reach it, so its theme sets its look.
import { useEffect, useRef } from "react";
import { basicSetup } from "codemirror";
import { html } from "@codemirror/lang-html";
import type { Completion, CompletionContext, CompletionResult } from "@codemirror/autocomplete";
import { Compartment, EditorState } from "@codemirror/state";
import { EditorView } from "@codemirror/view";
import { BUILT_IN_VARIABLES, closingBraces, variableAt } from "./logic";

interface Props {
  /** The accessible name of the editor ("Body"). */
  label: string;
  value: string;
  onChange: (value: string) => void;
  /** The contact data keys to offer besides the built-in variables. */
  variables: string[];
  /** The id of the element that describes the editor (its hint and error). */
  describedBy?: string;
  invalid?: boolean;
}

const theme = EditorView.theme({
  "&": { border: "1px solid #8c959f", borderRadius: "6px", minHeight: "14rem", backgroundColor: "#fff" },
  "&.cm-focused": { outline: "3px solid #bf8700", outlineOffset: "2px" },
  ".cm-scroller": { fontFamily: "ui-monospace, monospace", minHeight: "14rem", lineHeight: "1.5" },
  ".cm-tooltip-autocomplete": { fontFamily: "system-ui, sans-serif" },
  ".cm-gutters": { backgroundColor: "#f6f8fa", color: "#57606a" },
});

function attributes(label: string, describedBy?: string, invalid?: boolean) {
  return EditorView.contentAttributes.of({
    "aria-label": label,
    "aria-multiline": "true",
    ...(describedBy ? { "aria-describedby": describedBy } : {}),
    ...(invalid ? { "aria-invalid": "true" } : {}),
  });
}

export function CodeEditor({ label, value, onChange, variables, describedBy, invalid }: Props) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const changed = useRef(onChange);
  const names = useRef(variables);
  const aria = useRef(new Compartment());

  useEffect(() => {
    changed.current = onChange;
    names.current = variables;
  });

  // One editor for the component's life; its text follows `value` below.
  useEffect(() => {
    const complete = (ctx: CompletionContext): CompletionResult | null => {
      const line = ctx.state.doc.lineAt(ctx.pos);
      const at = variableAt(line.text.slice(0, ctx.pos - line.from));
      if (!at) return null;
      const braces = closingBraces(line.text.slice(0, at.from));
      // The name, and the braces that close it unless they are there already.
      const apply = (view: EditorView, c: Completion, from: number, to: number) => {
        const after = view.state.sliceDoc(to, to + braces).match(/^}*/)?.[0].length ?? 0;
        const insert = c.label + "}".repeat(Math.max(0, braces - after));
        view.dispatch({
          changes: { from, to, insert },
          selection: { anchor: from + insert.length + after },
        });
      };
      const options = [
        ...names.current.map((n) => ({ label: n, type: "variable", detail: "contact data", apply })),
        ...BUILT_IN_VARIABLES.map((v) => ({ label: v.name, type: "constant", detail: v.detail, apply })),
      ];
      return { from: line.from + at.from, options, validFor: /^[\w.]*$/ };
    };
    // In a shadow root, CodeMirror's styles are constructed style sheets (CSSOM); in the
    // document it would add a <style> element, which the CSP refuses.
    const root = host.current!.shadowRoot ?? host.current!.attachShadow({ mode: "open" });
    const editor = new EditorView({
      parent: root,
      root,
      state: EditorState.create({
        doc: value,
        extensions: [
          basicSetup,
          html(),
          EditorState.languageData.of(() => [{ autocomplete: complete }]),
          EditorView.lineWrapping,
          theme,
          aria.current.of(attributes(label, describedBy, invalid)),
          EditorView.updateListener.of((u) => {
            if (u.docChanged) changed.current(u.state.doc.toString());
          }),
        ],
      }),
    });
    view.current = editor;
    return () => {
      editor.destroy();
      view.current = null;
    };
    // Created once; later values arrive through the effects below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useEffect(() => {
    const editor = view.current;
    if (editor && editor.state.doc.toString() !== value) {
      editor.dispatch({ changes: { from: 0, to: editor.state.doc.length, insert: value } });
    }
  }, [value]);

  useEffect(() => {
    view.current?.dispatch({ effects: aria.current.reconfigure(attributes(label, describedBy, invalid)) });
  }, [label, describedBy, invalid]);

  return <div ref={host} className="code-editor" />;
}
