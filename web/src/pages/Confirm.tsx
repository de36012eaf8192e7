import { useEffect, useId, useRef, useState, type ReactNode } from "react";

// Two ways to ask before acting: in place (Confirm) or in a modal dialog (ConfirmDialog).

interface ConfirmProps {
  /** The button that asks, e.g. "Delete contact". */
  label: string;
  /** What will happen, said before anything is done. */
  question: string;
  /** The button that does it, e.g. "Yes, delete". */
  confirmLabel: string;
  onConfirm: () => void | Promise<void>;
  disabled?: boolean;
}

/** A button that asks first: the question and a confirming button appear in place, with the
 * focus on the confirming button (Escape or "Cancel" goes back). */
export function Confirm({ label, question, confirmLabel, onConfirm, disabled }: ConfirmProps) {
  const [open, setOpen] = useState(false);
  const [busy, setBusy] = useState(false);
  const yes = useRef<HTMLButtonElement>(null);
  const ask = useRef<HTMLButtonElement>(null);
  const id = useId();

  useEffect(() => {
    if (open) yes.current?.focus();
  }, [open]);

  function close() {
    setOpen(false);
    // Back to the button that asked, once it is shown again.
    requestAnimationFrame(() => ask.current?.focus());
  }

  async function confirm() {
    setBusy(true);
    try {
      await onConfirm();
    } finally {
      setBusy(false);
      setOpen(false);
    }
  }

  if (!open) {
    return (
      <button type="button" ref={ask} className="danger" disabled={disabled} onClick={() => setOpen(true)}>
        {label}
      </button>
    );
  }
  return (
    <div
      role="group"
      aria-labelledby={id}
      className="ask-first"
      onKeyDown={(e) => {
        if (e.key === "Escape") close();
      }}
    >
      <p id={id}>{question}</p>
      <button type="button" ref={yes} className="danger" disabled={busy} onClick={() => void confirm()}>
        {confirmLabel}
      </button>
      <button type="button" className="secondary" disabled={busy} onClick={close}>
        Cancel
      </button>
    </div>
  );
}

/**
 * A modal question (the browser's own <dialog>: the focus stays inside and Escape cancels),
 * shown while `open` (by default, while mounted), before something that cannot be undone or
 * that starts at once. `confirmDisabled` keeps the confirming button off, e.g. until the user has
 * typed what the dialog asks for; `danger` makes it red.
 */
export function ConfirmDialog({
  open = true,
  title,
  children,
  confirmLabel,
  cancelLabel = "Cancel",
  confirmDisabled,
  danger,
  onConfirm,
  onCancel,
}: {
  open?: boolean;
  title: string;
  children: ReactNode;
  confirmLabel: string;
  cancelLabel?: string;
  confirmDisabled?: boolean;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const id = useId();
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  useEffect(() => {
    const dialog = ref.current;
    return () => dialog?.close();
  }, []);
  return (
    <dialog
      ref={ref}
      aria-labelledby={`${id}-title`}
      aria-describedby={`${id}-text`}
      className="confirm"
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
      onClose={() => {
        if (open) onCancel();
      }}
    >
      <h2 id={`${id}-title`}>{title}</h2>
      <div id={`${id}-text`}>{children}</div>
      <div className="actions">
        <button type="button" className={danger ? "danger" : undefined} disabled={confirmDisabled} onClick={onConfirm}>
          {confirmLabel}
        </button>
        <button type="button" className="secondary" onClick={onCancel}>
          {cancelLabel}
        </button>
      </div>
    </dialog>
  );
}
