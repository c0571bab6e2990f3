"""Keras' functional API: keras.Input, layers called on its tensors, keras.Model(inputs, outputs).
Keras' own documentation examples that need only the layers Tandem has (the toy ResNet's residual
blocks, a shared layer), each trained one step and compared with PyTorch's step from the same
weights (within 1e-5 relative per tensor); the model under a strategy; mistakes named."""
import json

import numpy as np
import pytest


def toy_resnet(tf, filters=8):
    """The functional API guide's "toy ResNet model" (smaller: 12×12 images, fewer filters, no dropout)."""
    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=(12, 12, 3), name="img")
    x = layers.Conv2D(filters, 3, activation="relu")(inputs)
    x = layers.Conv2D(2 * filters, 3, activation="relu")(x)
    block_1_output = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(2 * filters, 3, activation="relu", padding="same")(block_1_output)
    x = layers.Conv2D(2 * filters, 3, activation="relu", padding="same")(x)
    block_2_output = layers.add([x, block_1_output])
    x = layers.Conv2D(2 * filters, 3, activation="relu", padding="same")(block_2_output)
    x = layers.Conv2D(2 * filters, 3, activation="relu", padding="same")(x)
    block_3_output = layers.add([x, block_2_output])
    x = layers.Conv2D(2 * filters, 3, activation="relu")(block_3_output)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(16, activation="relu")(x)
    outputs = layers.Dense(5)(x)
    return tf.keras.Model(inputs, outputs, name="toy_resnet", seed=3)


def images(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(n, 12, 12, 3)).astype(np.float32), (np.arange(n) % 5).astype(np.int32)


def one_step(tf, model, x, y, lr=0.1):
    model.compile(optimizer=tf.keras.optimizers.SGD(lr),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.get_weights()
    model.fit(x, y, batch_size=len(y), epochs=1, shuffle=False, verbose=0)
    return before, model.get_weights()


def close_per_tensor(got, want, rel=1e-5):
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.max(np.abs(g - w)) <= rel * max(np.max(np.abs(w)), 1e-30), (np.max(np.abs(g - w)), np.max(np.abs(w)))


def torch_step(torch, forward, params, x, y, lr=0.1):
    """One SGD step of PyTorch on `params` (numpy arrays in Keras' layouts, made tensors here)."""
    ps = [torch.tensor(p, requires_grad=True) for p in params]
    logits = forward(ps, torch.tensor(x))
    torch.nn.functional.cross_entropy(logits, torch.tensor(y, dtype=torch.long)).backward()
    with torch.no_grad():
        return [(p - lr * p.grad).numpy() for p in ps]


def test_the_toy_resnet_of_keras_guide_takes_pytorchs_step(tf):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (bash bench/run installs Debian's)")
    F = torch.nn.functional
    model = toy_resnet(tf)
    assert [l.type for l in model.layers][:3] == ["Conv2D", "Conv2D", "MaxPooling2D"]
    assert len(model.layers) == 13 and model.count_params() == sum(w.size for w in model.get_weights())
    x, y = images()
    before, after = one_step(tf, model, x, y)

    def forward(p, t):
        def conv(h, i, padding):  # Keras' (kh, kw, in, out) kernel as PyTorch's (out, in, kh, kw)
            return F.relu(F.conv2d(h, p[i].permute(3, 2, 0, 1), p[i + 1], padding=padding))
        h = conv(t.permute(0, 3, 1, 2), 0, 0)
        h = conv(h, 2, 0)
        b1 = F.max_pool2d(h, 2)
        b2 = conv(conv(b1, 4, 1), 6, 1) + b1
        b3 = conv(conv(b2, 8, 1), 10, 1) + b2
        h = conv(b3, 12, 0).mean(dim=(2, 3))
        h = F.relu(h @ p[14] + p[15])
        return h @ p[16] + p[17]

    close_per_tensor(after, torch_step(torch, forward, before, x, y))


def test_a_shared_layer_is_one_layer_and_takes_pytorchs_step(tf):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (bash bench/run installs Debian's)")
    layers = tf.keras.layers
    inputs = tf.keras.Input((6,))
    shared = layers.Dense(6, activation="tanh")
    twice = shared(shared(inputs))
    joined = layers.concatenate([inputs, twice])
    model = tf.keras.Model(inputs, layers.Dense(4)(joined), seed=5)
    assert len(model.layers) == 3 and model.count_params() == 6 * 6 + 6 + 12 * 4 + 4
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-1, 1, size=(10, 6)).astype(np.float32), (np.arange(10) % 4).astype(np.int32)
    before, after = one_step(tf, model, x, y)

    def forward(p, t):
        h = torch.tanh(torch.tanh(t @ p[0] + p[1]) @ p[0] + p[1])
        return torch.cat([t, h], dim=1) @ p[2] + p[3]

    close_per_tensor(after, torch_step(torch, forward, before, x, y))


def test_a_two_input_model_takes_pytorchs_step(tf):
    """Keras' guide's models of several inputs, with the layers Tandem has: an image and a vector."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (bash bench/run installs Debian's)")
    F = torch.nn.functional
    layers = tf.keras.layers
    image, meta = tf.keras.Input((6, 6, 1), name="image"), tf.keras.Input((3,), name="meta")
    a = layers.GlobalAveragePooling2D()(layers.Conv2D(4, 3, activation="relu")(image))
    b = layers.Dense(4, activation="relu")(meta)
    model = tf.keras.Model([image, meta], layers.Dense(3)(layers.concatenate([a, b])), seed=2)
    rng = np.random.default_rng(4)
    xi, xm = rng.uniform(-1, 1, (10, 6, 6, 1)).astype(np.float32), rng.uniform(-1, 1, (10, 3)).astype(np.float32)
    y = (np.arange(10) % 3).astype(np.int32)
    by_list = model.predict([xi, xm], verbose=0)
    np.testing.assert_array_equal(model.predict({"meta": xm, "image": xi}, verbose=0), by_list)
    with pytest.raises(tf.Error, match=r"the model has 2 inputs \['image', 'meta'\]"):
        model.predict(xi, verbose=0)
    with pytest.raises(tf.Error, match="input 'meta' has shape"):
        model.predict([xi, xi], verbose=0)
    before, after = one_step(tf, model, [xi, xm], y)

    def forward(p, inputs):
        t = torch.from_numpy(xi).permute(0, 3, 1, 2)
        h = F.relu(F.conv2d(t, p[0].permute(3, 2, 0, 1), p[1])).mean(dim=(2, 3))
        m = F.relu(torch.from_numpy(xm) @ p[2] + p[3])
        return torch.cat([h, m], dim=1) @ p[4] + p[5]

    close_per_tensor(after, torch_step(torch, forward, before, xi, y))


def test_summary_has_keras_connected_to_column(tf):
    lines = []
    toy_resnet(tf).summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "Connected to" in text and "img (InputLayer)" in text
    assert "img[0][0]" in text and "max_pooling2d[0][0]" in text and "add[0][0]" in text, text


def test_a_functional_model_trains_under_a_strategy_as_on_one_device(tf):
    x, y = images(32)

    def trained(strategy):
        if strategy is None:
            model = toy_resnet(tf)
        else:
            with strategy.scope():
                model = toy_resnet(tf)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        return model

    alone = trained(None)
    strategy = tf.distribute.MirroredStrategy(num_replicas=2)
    mirrored = trained(strategy)
    runs = strategy._handle.replica_runs
    assert len(runs) == 2 and min(runs) > 0 and len(set(runs)) == 1, runs
    close_per_tensor(mirrored.get_weights(), alone.get_weights(), 2e-5)
    np.testing.assert_allclose(mirrored.predict(x, verbose=0), alone.predict(x, verbose=0), rtol=1e-4, atol=1e-5)


def test_layers_and_models_mistakes_are_named(tf):
    layers = tf.keras.layers
    a, b = tf.keras.Input((4,)), tf.keras.Input((5,))
    with pytest.raises(tf.Error, match="its inputs must have one shape"):
        layers.Add()([a, b])
    with pytest.raises(tf.Error, match="called on .*ndarray.*keras.Input tensors"):
        layers.Dense(2)(np.ones((3, 4), np.float32))
    with pytest.raises(tf.Error, match="not among the model's inputs"):
        tf.keras.Model(a, layers.Dense(2)(layers.concatenate([a, layers.Dense(4)(b)])))
    with pytest.raises(tf.Error, match="inputs must be keras.Input tensors"):
        tf.keras.Model(np.ones(4), a)
    with pytest.raises(tf.Error, match="subclassed model"):
        tf.keras.Model()
    with pytest.raises(tf.Error, match="max_value=6"):
        layers.ReLU(max_value=6)
    assert tf.keras.Input((3, 2)).shape == (None, 3, 2)
    # A Sequential still takes keras.Input first.
    seq = tf.keras.Sequential([tf.keras.Input((4,)), layers.Dense(2)])
    assert seq.built and isinstance(seq, tf.keras.Model)


def test_a_functional_model_round_trips_through_keras_json_and_keras_files(tf, tmp_path):
    """to_json / model_from_json and save / load_model keep the graph (two inputs, a shared layer,
    a residual add), its weights, its optimizer and its predictions."""
    layers = tf.keras.layers
    a, b = tf.keras.Input((6,), name="left"), tf.keras.Input((6,), name="right")
    shared = layers.Dense(6, activation="relu", name="shared")
    joined = layers.concatenate([layers.add([shared(a), a]), shared(b)])
    model = tf.keras.Model([a, b], layers.Dense(3)(joined), name="pair", seed=4)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    x = [rng.normal(size=(20, 6)).astype(np.float32) for _ in range(2)]
    y = (np.arange(20) % 3).astype(np.int32)
    model.fit(x, y, batch_size=10, epochs=2, verbose=0)
    text = model.to_json()
    config = json.loads(text)
    assert config["class_name"] == "Functional"
    assert config["config"]["input_layers"] == [["left", 0, 0], ["right", 0, 0]]
    assert [l["name"] for l in config["config"]["layers"]] == ["left", "right", "shared", "add", "concatenate", "dense"]
    again = tf.keras.models.model_from_json(text, seed=4)
    assert isinstance(again, tf.keras.Model) and not isinstance(again, tf.keras.Sequential)
    assert again.to_json() == text
    model.save(tmp_path / "pair.keras")
    loaded = tf.keras.models.load_model(tmp_path / "pair.keras")
    assert loaded.to_json() == text
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(loaded.predict({"right": x[1], "left": x[0]}, verbose=0),
                                  model.predict(x, verbose=0))
    loaded.fit(x, y, batch_size=10, epochs=1, verbose=0)  # compiled from the file: Adam's state went on


def test_a_model_of_two_outputs_takes_pytorchs_step_and_reports_each_output(tf):
    """Keras' multi-output form: a loss per output (a dict by name), loss_weights, y as a dict or
    a list, predict giving a list; one step equals PyTorch's weighted sum of the two losses."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (bash bench/run installs Debian's)")
    F = torch.nn.functional
    layers = tf.keras.layers
    x_in = tf.keras.Input((5,), name="features")
    h = layers.Dense(8, activation="relu")(x_in)
    model = tf.keras.Model(x_in, [layers.Dense(3, name="kind")(h), layers.Dense(2, name="size")(h)], seed=3)
    assert model.output_names == ["kind", "size"]
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                  loss={"kind": tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), "size": "mse"},
                  loss_weights={"kind": 1.0, "size": 0.5}, metrics=["accuracy"])
    rng = np.random.default_rng(2)
    x = rng.normal(size=(16, 5)).astype(np.float32)
    kind, size = (np.arange(16) % 3).astype(np.int32), rng.normal(size=(16, 2)).astype(np.float32)
    before = model.get_weights()
    history = model.fit(x, {"size": size, "kind": kind}, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert {"loss", "kind_loss", "size_loss", "kind_accuracy", "size_accuracy"} <= set(history.history)

    def forward(p, t):
        hidden = F.relu(t @ p[0] + p[1])
        return hidden @ p[2] + p[3], hidden @ p[4] + p[5]

    ps = [torch.tensor(w, requires_grad=True) for w in before]
    logits, pred = forward(ps, torch.tensor(x))
    loss = F.cross_entropy(logits, torch.tensor(kind, dtype=torch.long)) + 0.5 * F.mse_loss(pred, torch.tensor(size))
    loss.backward()
    with torch.no_grad():
        close_per_tensor(model.get_weights(), [(p - 0.1 * p.grad).numpy() for p in ps])
    out = model.predict(x, verbose=0)
    assert [o.shape for o in out] == [(16, 3), (16, 2)]
    called = model(x)  # a custom loop's forward: a list, as Keras'
    assert [tuple(t.shape) for t in called] == [(16, 3), (16, 2)]
    np.testing.assert_allclose(called[1].numpy(), out[1], rtol=1e-6, atol=1e-6)
    total, kind_loss, size_loss = model.evaluate(x, [kind, size], verbose=0)[:3]
    assert abs(total - (kind_loss + 0.5 * size_loss)) < 1e-5
    with pytest.raises(tf.Error, match="the model has 2 outputs"):
        model.fit(x, kind, verbose=0)
    with pytest.raises(tf.Error, match="loss has no entry for outputs"):
        model.compile(optimizer="sgd", loss={"kind": "mse"})
    with pytest.raises(tf.Error, match="class_weight weighs one output's classes"):
        model.fit(x, [kind, size], class_weight={0: 2.0}, verbose=0)


def test_the_resnet20_example_is_the_command_lines_network_and_trains(tf):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("resnet20_example", ROOT / "examples" / "resnet20.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = example.resnet20(seed=2)
    assert model.count_params() == 274042  # `tandem summary --model resnet20` says the same
    assert sum(l.type == "Add" for l in model.layers) == 9 and sum(l.type == "Conv2D" for l in model.layers) == 21
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 1, (32, 32, 32, 3)).astype(np.float32), (np.arange(32) % 10).astype(np.int32)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history["loss"]
    assert losses[-1] < losses[0], losses
