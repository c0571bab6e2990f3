"""Ctrl-C during fit: SIGINT sent to a child interpreter that trains ends fit with
KeyboardInterrupt within a second, the process alive and the model usable: its weights are bitwise
those of the same model trained for as many whole batches as its optimizer counts (no batch half
applied). The child has a watchdog and is killed if the test fails."""
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

    def make_model():
        model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu", input_shape=(200,)),
                                     tf.keras.layers.Dense(10)], seed=3)
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    model = make_model()

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

    # The same model stopped after exactly that many batches (an exception after a batch's update,
    # as the interrupt is): the same bits.
    class Enough(Exception):
        pass

    class StopAt(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.model.optimizer.iterations == iterations:
                raise Enough()

    replay = make_model()
    try:
        replay.fit(x, y, epochs=1000, batch_size=32, verbose=0, callbacks=[StopAt()])
    except Enough:
        pass
    assert replay.optimizer.iterations == iterations, (replay.optimizer.iterations, iterations)
    for kept, whole in zip(model.get_weights(), replay.get_weights()):
        assert np.array_equal(kept, whole), "the interrupted model is not that of its whole batches"
    print("kept", flush=True)
    out = model.predict(x[:64])
    assert np.isfinite(out).all()
    model.fit(x[:64], y[:64], epochs=1, verbose=0)  # trains on
    assert model.optimizer.iterations == iterations + 2
    print("usable", flush=True)
""")


def test_ctrl_c_interrupts_fit_and_keeps_the_model():
    # SIGINT as the child's parent left it, or the child would ignore it where the test runs in a
    # shell's background job (which sets it to SIG_IGN, and Python then installs no handler).
    child = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", CHILD], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120  # watchdog
        line = child.stdout.readline()
        assert line.strip() == "training", line + child.stderr.read()
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    lines = out.split()
    assert child.returncode == 0, out + err
    assert "interrupted" in lines and "kept" in lines and "usable" in lines, out + err
    interrupted_at = float(lines[lines.index("interrupted") + 1])
    assert interrupted_at - sent < 1.0, f"KeyboardInterrupt {interrupted_at - sent:.3f} s after SIGINT"
