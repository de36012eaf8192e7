// A CodeMirror editor for a template's HTML body, with the variables completed inside `{{`.
// Its styles go through CSSOM (constructed style sheets), which the strict CSP allows.
import { useEffect, useRef } from "react";
import { basicSetup } from "codemirror";
import { html } from "@codemirror/lang-html";
import type { CompletionContext, CompletionResult } from "@codemirror/autocomplete";
import { Compartment, EditorState } from "@codemirror/state";
import { EditorView } from "@codemirror/view";
import { BUILT_IN_VARIABLES, variableAt } from "./logic";

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
  ".cm-scroller": { fontFamily: "ui-monospace, monospace", minHeight: "14rem" },
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
      const options = [
        ...names.current.map((n) => ({ label: n, type: "variable", detail: "contact data" })),
        ...BUILT_IN_VARIABLES.map((v) => ({ label: v.name, type: "constant", detail: v.detail })),
      ];
      return { from: line.from + at.from, options, validFor: /^[\w.]*$/ };
    };
    const editor = new EditorView({
      parent: host.current!,
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
