"""The names of Keras's own layer classes (keras 3 and Keras 2 / tf_keras), whatever attnzoo converts.

A legacy ``.h5`` records a layer's class but not its module, so this list is what tells Keras's own
``Conv2DTranspose`` from a custom class: a built-in class nothing converts is reported as Keras's
("no converter for Keras's Conv2DTranspose"), never as a custom layer. Taken from ``dir(keras.layers)``
of keras 3.15 and tf_keras 2.21, plus the classes Keras 2 writes for functional operations.
"""

from __future__ import annotations

__all__ = ["KERAS_CLASSES"]

_NAMES = """
    AbstractRNNCell Activation ActivityRegularization AdaptiveAveragePooling1D AdaptiveAveragePooling2D
    AdaptiveAveragePooling3D AdaptiveMaxPooling1D AdaptiveMaxPooling2D AdaptiveMaxPooling3D Add AdditiveAttention
    AlphaDropout Attention AugMix AutoContrast Average AveragePooling1D AveragePooling2D AveragePooling3D
    AvgPool1D AvgPool2D AvgPool3D BatchNormalization Bidirectional CategoryEncoding CenterCrop Concatenate
    ContrastLimitedAdaptiveHistogramEqualization Conv1D Conv1DTranspose Conv2D Conv2DTranspose Conv3D
    Conv3DTranspose ConvLSTM1D ConvLSTM2D ConvLSTM3D Convolution1D Convolution1DTranspose Convolution2D
    Convolution2DTranspose Convolution3D Convolution3DTranspose Cropping1D Cropping2D Cropping3D CuDNNGRU
    CuDNNLSTM CutMix Dense DenseFeatures DepthwiseConv1D DepthwiseConv2D Discretization Dot Dropout ELU
    EinsumDense Embedding Equalization Flatten FlaxLayer Functional GRU GRUCell GaussianDropout GaussianNoise
    GlobalAveragePooling1D GlobalAveragePooling2D GlobalAveragePooling3D GlobalAvgPool1D GlobalAvgPool2D
    GlobalAvgPool3D GlobalMaxPool1D GlobalMaxPool2D GlobalMaxPool3D GlobalMaxPooling1D GlobalMaxPooling2D
    GlobalMaxPooling3D GroupNormalization GroupQueryAttention HashedCrossing Hashing Identity InputLayer
    IntegerLookup JaxLayer LSTM LSTMCell Lambda Layer LayerNormalization LeakyReLU LocallyConnected1D
    LocallyConnected2D Masking MaxNumBoundingBoxes MaxPool1D MaxPool2D MaxPool3D MaxPooling1D MaxPooling2D
    MaxPooling3D Maximum MelSpectrogram Minimum MixUp Model MultiHeadAttention Multiply Normalization PReLU
    Permute Pipeline RMSNormalization RNN RandAugment RandomBrightness RandomColorDegeneration RandomColorJitter
    RandomContrast RandomCrop RandomElasticTransform RandomErasing RandomFlip RandomGaussianBlur RandomGrayscale
    RandomHeight RandomHue RandomInvert RandomPerspective RandomPosterization RandomRotation RandomSaturation
    RandomSharpness RandomShear RandomTranslation RandomWidth RandomZoom ReLU RepeatVector Rescaling Reshape
    Resizing ReversibleEmbedding STFTSpectrogram SeparableConv1D SeparableConv2D SeparableConvolution1D
    SeparableConvolution2D Sequential SimpleRNN SimpleRNNCell SlicingOpLambda Softmax Solarization
    SpatialDropout1D SpatialDropout2D SpatialDropout3D SpectralNormalization StackedRNNCells StringLookup
    Subtract TFOpLambda TFSMLayer TextVectorization ThresholdedReLU TimeDistributed TorchModuleWrapper
    UnitNormalization UpSampling1D UpSampling2D UpSampling3D Wrapper ZeroPadding1D ZeroPadding2D ZeroPadding3D
"""
KERAS_CLASSES = frozenset(_NAMES.split())
