"""Keras callbacks (tf.keras.callbacks): the engine's built-in ones, and ``Callback`` to subclass."""
from .. import _tandem
from ..errors import Error

__all__ = ["Callback", "History", "ModelCheckpoint", "BackupAndRestore", "TensorBoard", "EarlyStopping",
           "CSVLogger", "TerminateOnNaN"]


class Callback:
    """Subclass and override the hooks you need; fit calls them with ``logs``, a dict of the values
    of the moment (loss, metrics, and at epoch end val_ ones). ``self.model`` is the model being
    trained; set ``self.model.stop_training = True`` to end fit after the current batch. A hook
    that raises ends fit with that exception. Batch hooks are called only when overridden."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs)

    def on_batch_begin(self, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass


class History(Callback):
    """What fit returns: ``history`` maps each logged name to its value per epoch."""

    def __init__(self, history=None, epoch=None, model=None, params=None):
        super().__init__()
        self.history = history or {}
        self.epoch = epoch or []
        self.model = model
        self.params = params or {}

    def __repr__(self):
        return f"<History epochs={len(self.epoch)} keys={sorted(self.history)}>"


def _freq(save_freq, what):
    if save_freq == "epoch":
        return 0
    if isinstance(save_freq, int) and save_freq > 0:
        return save_freq
    raise Error(f"{what}: save_freq must be 'epoch' or a positive number of batches, got {save_freq!r}")


def ModelCheckpoint(filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                    mode="auto", save_freq="epoch", options=None, initial_value_threshold=None):
    """Saves the model after each epoch (or every ``save_freq`` batches); ``filepath`` may hold
    ``{epoch:02d}`` and logged values such as ``{val_loss:.2f}``. Files are safetensors; without
    save_weights_only they also hold the optimizer and the training position. ``verbose`` prints
    nothing more in Tandem; ``initial_value_threshold`` is refused."""
    if initial_value_threshold is not None:
        raise Error("ModelCheckpoint: initial_value_threshold is not supported by Tandem")
    if options is not None:
        raise Error("ModelCheckpoint: options (tf.train.CheckpointOptions) are not supported by Tandem")
    return _tandem.ModelCheckpoint(str(filepath), monitor, bool(save_best_only), bool(save_weights_only), mode,
                                   _freq(save_freq, "ModelCheckpoint"))


def BackupAndRestore(backup_dir, save_freq="epoch", delete_checkpoint=True, save_before_preemption=False,
                     double_checkpoint=False):
    """Backs up the training state in ``backup_dir``; a fit interrupted (even killed) resumes there.
    Each backup is written whole before it replaces the last (a kill mid-write leaves the last
    one), so ``double_checkpoint`` is refused, as is ``save_before_preemption`` (a preemption
    notice of TPU and GCE hosts)."""
    if save_before_preemption:
        raise Error("BackupAndRestore: save_before_preemption=True is not supported: Tandem gets no preemption "
                    "notice; back up every epoch or every save_freq batches")
    if double_checkpoint:
        raise Error("BackupAndRestore: double_checkpoint=True is not supported: each backup is written whole before "
                    "it replaces the last, so a kill mid-write leaves the previous one")
    return _tandem.BackupAndRestore(str(backup_dir), _freq(save_freq, "BackupAndRestore"), bool(delete_checkpoint))


def TensorBoard(log_dir="logs", histogram_freq=0, write_graph=True, write_images=False, write_steps_per_second=False,
                update_freq="epoch", profile_batch=0, embeddings_freq=0, embeddings_metadata=None):
    """Writes TensorBoard event files under log_dir/train and log_dir/validation: the logged values
    each epoch, or every ``update_freq`` batches ('batch': each). Tandem writes no graph
    (``write_graph`` is accepted and writes nothing); histograms, images, steps per second,
    profiles and embeddings are refused by name."""
    for name, value, off in (("histogram_freq", histogram_freq, 0), ("write_images", write_images, False),
                             ("write_steps_per_second", write_steps_per_second, False),
                             ("profile_batch", profile_batch, 0), ("embeddings_freq", embeddings_freq, 0),
                             ("embeddings_metadata", embeddings_metadata, None)):
        if value != off:
            raise Error(f"TensorBoard: {name}={value!r} is not supported by Tandem (only the logged values are "
                        "written)")
    if update_freq == "epoch":
        every = 0
    elif update_freq == "batch":
        every = 1
    elif isinstance(update_freq, int) and not isinstance(update_freq, bool) and update_freq > 0:
        every = update_freq
    else:
        raise Error(f"TensorBoard: update_freq must be 'epoch', 'batch' or a positive number of batches, got "
                    f"{update_freq!r}")
    return _tandem.TensorBoard(str(log_dir), every)


def EarlyStopping(monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                  restore_best_weights=False, start_from_epoch=0):
    """Stops training when ``monitor`` has not improved for ``patience`` epochs."""
    if baseline is not None:
        raise Error("EarlyStopping: baseline is not supported")
    if start_from_epoch != 0:
        raise Error("EarlyStopping: start_from_epoch is not supported by Tandem (it watches from the first epoch)")
    return _tandem.EarlyStopping(monitor, float(min_delta), int(patience), mode, bool(restore_best_weights))


def CSVLogger(filename, separator=",", append=False):
    """Streams each epoch's logs to a CSV file."""
    return _tandem.CSVLogger(str(filename), separator, bool(append))


def TerminateOnNaN():
    """Stops training when the loss becomes NaN or infinite."""
    return _tandem.TerminateOnNaN()
