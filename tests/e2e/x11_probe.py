"""A real X client that writes down the input it receives, one line per X event, so tests
can check what reached a window: `python3 x11_probe.py LOG [GEOMETRY]`.

Lines: `press N X Y STATE`, `release N X Y STATE`, `motion X Y STATE`, `key KEYSYM STATE T`, `keyup KEYSYM T` (T: seconds since the probe started). X and Y
are root coordinates; STATE is the X modifier mask (1 shift, 4 control, 256 button 1).
The window's class is `Probe`.
"""

import sys
import time
import tkinter

log = open(sys.argv[1], "a", buffering=1)
start = time.monotonic()
root = tkinter.Tk(className="Probe")
root.title("probe")
root.geometry(sys.argv[2] if len(sys.argv) > 2 else "600x400+0+0")
canvas = tkinter.Canvas(root, background="white", highlightthickness=0)
canvas.pack(fill="both", expand=True)


def write(line: str) -> None:
    log.write(line + "\n")


root.bind("<ButtonPress>", lambda e: write(f"press {e.num} {e.x_root} {e.y_root} {e.state}"))
root.bind("<ButtonRelease>", lambda e: write(f"release {e.num} {e.x_root} {e.y_root} {e.state}"))
root.bind("<Motion>", lambda e: write(f"motion {e.x_root} {e.y_root} {e.state}"))
root.bind("<KeyPress>", lambda e: write(f"key {e.keysym} {e.state} {time.monotonic() - start:.3f}"))
root.bind("<KeyRelease>", lambda e: write(f"keyup {e.keysym} {time.monotonic() - start:.3f}"))
root.after(100, lambda: write("ready"))
root.mainloop()
