"""Keras' optimizer arguments act or are refused: global_clipnorm and AdamW's decoupled weight decay
give torch.nn.utils.clip_grad_norm_'s and torch.optim.AdamW's weights after 10 steps (their
algorithms written out here in float64, and PyTorch itself where it is installed), clipnorm and
clipvalue act, what Tandem does not do is refused by name."""
import numpy as np
import pytest


def data():
    rng = np.random.default_rng(5)
    return rng.uniform(-1, 1, (32, 5)).astype(np.float32), rng.uniform(-1, 1, (32, 3)).astype(np.float32)


def tandem_steps(tf, optimizer, steps=10):
    """A linear Dense layer on mean squared error, full batches: (weights before, weights after)."""
    x, t = data()
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(5,))], seed=1)
    model.compile(optimizer=optimizer, loss="mse")
    before = [w.astype(np.float64) for w in model.get_weights()]
    model.fit(x, t, epochs=steps, batch_size=32, shuffle=False, verbose=0)
    return before, model.get_weights()


def gradients(w, b, x, t):
    """Of mean((x·w + b - t)²) over every element (Keras' mse, averaged over the batch)."""
    dy = 2.0 * (x @ w + b - t) / t.size
    return x.T @ dy, dy.sum(0)


def torch_adamw_global_clip(w, b, x, t, lr, wd, eps, max_norm, steps, b1=0.9, b2=0.999):
    """torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW's step, in float64."""
    x, t = x.astype(np.float64), t.astype(np.float64)
    params, m, v = [w.copy(), b.copy()], [np.zeros_like(w), np.zeros_like(b)], [np.zeros_like(w), np.zeros_like(b)]
    for step in range(1, steps + 1):
        grads = list(gradients(params[0], params[1], x, t))
        total = np.sqrt(sum((g * g).sum() for g in grads))
        coef = max_norm / (total + 1e-6)
        if coef < 1:
            grads = [g * coef for g in grads]
        for i, g in enumerate(grads):
            params[i] *= 1 - lr * wd
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] -= lr * (m[i] / (1 - b1 ** step)) / (np.sqrt(v[i] / (1 - b2 ** step)) + eps)
    return params


def test_global_clipnorm_and_adamw_are_pytorchs(tf):
    # epsilon tiny on both sides: Keras adds it to √v and PyTorch to √v̂, a difference of 3e-5 at
    # Keras' 1e-7 that is neither clipping's nor weight decay's.
    before, after = tandem_steps(tf, tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.1, epsilon=1e-12,
                                                               global_clipnorm=0.05))
    x, t = data()
    want = torch_adamw_global_clip(before[0], before[1], x, t, 0.01, 0.1, 1e-12, 0.05, 10)
    unclipped = torch_adamw_global_clip(before[0], before[1], x, t, 0.01, 0.1, 1e-12, 1e9, 10)
    assert not np.allclose(want[0], unclipped[0], rtol=1e-3), "the norm never reached the clip: the test shows nothing"
    for got, ref in zip(after, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_the_same_against_pytorch_itself(tf):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (bash bench/run installs Debian's)")
    before, after = tandem_steps(tf, tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.1, epsilon=1e-12,
                                                               global_clipnorm=0.05))
    x, t = (torch.tensor(a, dtype=torch.float64) for a in data())
    w = torch.tensor(before[0], requires_grad=True)
    b = torch.tensor(before[1], requires_grad=True)
    opt = torch.optim.AdamW([w, b], lr=0.01, weight_decay=0.1, eps=1e-12)
    for _ in range(10):
        opt.zero_grad()
        ((x @ w + b - t) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_([w, b], 0.05)
        opt.step()
    for got, ref in zip(after, (w.detach().numpy(), b.detach().numpy())):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def test_clipnorm_clipvalue_and_weight_decay_act_on_every_optimizer(tf):
    opt = tf.keras.optimizers
    for make in (opt.SGD, opt.Adam, opt.RMSprop, opt.Adagrad):
        _, plain = tandem_steps(tf, make(learning_rate=0.1), 3)
        for extra in ({"clipnorm": 1e-3}, {"clipvalue": 1e-4}, {"weight_decay": 0.5}):
            _, changed = tandem_steps(tf, make(learning_rate=0.1, **extra), 3)
            assert not np.allclose(changed[0], plain[0]), f"{make.__name__}({extra}) changed nothing"
    assert opt.AdamW().weight_decay == pytest.approx(0.004)


def test_what_tandem_does_not_do_is_refused_by_name(tf):
    opt = tf.keras.optimizers
    with pytest.raises(tf.Error, match="use_ema"):
        opt.Adam(use_ema=True)
    with pytest.raises(tf.Error, match="amsgrad is not built"):
        opt.AdamW(amsgrad=True)
    with pytest.raises(tf.Error, match="centered is not built"):
        opt.RMSprop(centered=True)
    with pytest.raises(tf.Error, match="loss_scale_factor"):
        opt.SGD(loss_scale_factor=128.0)
    with pytest.raises(tf.Error, match="gradient_accumulation_steps"):
        opt.SGD(gradient_accumulation_steps=4)
    with pytest.raises(tf.Error, match=r"clipnorm \(1\) and global_clipnorm \(1\) cannot both be set"):
        opt.Adam(clipnorm=1.0, global_clipnorm=1.0)
    with pytest.raises(tf.Error, match="clipvalue must be a positive number or None, got -1"):
        opt.SGD(clipvalue=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument .decay."):
        opt.SGD(decay=0.01)
    with pytest.raises(tf.Error, match="unknown optimizer 'adamax'"):
        opt.get("adamax")
