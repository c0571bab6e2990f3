# The R tutorial (002_14f4d7ac3042165e.txt) through reticulate, with Tandem in TensorFlow's place.
# Debian ships no R keras package, so its library(keras) calls become calls on the Python objects:
# keras_model_sequential() is tf$keras$Sequential(), `model %>% layer_dense(...)` is
# model$add(tf$keras$layers$Dense(...)), dataset_mnist() is tf$keras$datasets$mnist$load_data(),
# to_categorical is tf$keras$utils$to_categorical, compile and fit are methods. Integers are
# written as R integers (256L), as R's keras package converts them. The strategies are made as
# the tutorial makes them (with no cluster given, MultiWorkerMirroredStrategy is one worker and
# ParameterServerStrategy a cluster in this process).
# Prints one ACCURACY line per strategy trained.
library(reticulate)
args <- commandArgs(trailingOnly = TRUE)
epochs <- if (length(args) > 0) as.integer(args[1]) else 10L

tf <- import("tandem")
strategy <- list()
# Creating strategies
strategy$mirrored <- tf$compat$v1$distribute$MirroredStrategy()
strategy$central_storage <- tf$distribute$experimental$CentralStorageStrategy()
strategy$multiworker_mirrored <- tf$distribute$experimental$MultiWorkerMirroredStrategy()
strategy$parameter_server <- tf$distribute$experimental$ParameterServerStrategy()

# mnist dataset
mnist <- tf$keras$datasets$mnist$load_data()
x_train <- mnist[[1]][[1]]
y_train <- mnist[[1]][[2]]
x_test <- mnist[[2]][[1]]
y_test <- mnist[[2]][[2]]
# reshape
x_train <- array_reshape(x_train, c(nrow(x_train), 784))
x_test <- array_reshape(x_test, c(nrow(x_test), 784))
# rescale
x_train <- x_train / 255
x_test <- x_test / 255
y_train <- tf$keras$utils$to_categorical(y_train, 10L)
y_test <- tf$keras$utils$to_categorical(y_test, 10L)

for (name in c("central_storage", "mirrored", "multiworker_mirrored", "parameter_server")) {
  model <- tf$keras$Sequential()
  with(strategy[[name]]$scope(), {
    model$add(tf$keras$layers$Dense(units = 256L, activation = "relu", input_shape = c(784L)))
    model$add(tf$keras$layers$Dropout(rate = 0.4))
    model$add(tf$keras$layers$Dense(units = 128L, activation = "relu"))
    model$add(tf$keras$layers$Dropout(rate = 0.3))
    model$add(tf$keras$layers$Dense(units = 10L, activation = "softmax"))
  })
  model$compile(loss = "categorical_crossentropy", optimizer = tf$keras$optimizers$RMSprop(), metrics = c("accuracy"))
  history <- model$fit(x_train, y_train, epochs = epochs, batch_size = 128L, validation_split = 0.2, verbose = 2L)
  cat(sprintf("STRATEGY %s %s\n", name, model$distribute_strategy$name))
  cat(sprintf("ACCURACY %s %f\n", name, model$evaluate(x_test, y_test, verbose = 0L)[[2]]))
}
