import { useEffect, useId, useRef, type ReactNode } from "react";

interface ConfirmProps {
  title: string;
  children: ReactNode;
  confirm: string;
  cancel: string;
  onConfirm: () => void;
  onCancel: () => void;
}

/**
 * A modal question (the browser's own <dialog>: focus kept inside, Escape closes it), shown
 * while mounted.
 */
export function Confirm({ title, children, confirm, cancel, onConfirm, onCancel }: ConfirmProps) {
  const ref = useRef<HTMLDialogElement>(null);
  const id = useId();
  useEffect(() => {
    const dialog = ref.current;
    if (dialog && !dialog.open) dialog.showModal();
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
    >
      <h2 id={`${id}-title`}>{title}</h2>
      <div id={`${id}-text`}>{children}</div>
      <div className="actions">
        <button type="button" onClick={onConfirm}>
          {confirm}
        </button>
        <button type="button" className="secondary" onClick={onCancel}>
          {cancel}
        </button>
      </div>
    </dialog>
  );
}
