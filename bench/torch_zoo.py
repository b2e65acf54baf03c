"""kiln's zoo models that torchvision lacks, as PyTorch modules: twins built from
src/model/zoo.cpp's layer lists, their modules named as kiln::torch_names maps kiln's tensors. Used
by torch_training_reference.py (the GPU equivalence tests) and torch_models.py (the benchmarks)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class DigitsCnn(nn.Module):
    """kiln's zoo::digits_cnn: four CBRs (conv1..conv4 named as torch_names maps a cbr composite:
    convN + bnN), two max pools, fc1 (128) + ReLU + dropout 0.25, fc2."""

    def __init__(self, side=20, classes=10):
        super().__init__()
        for i, (cin, cout) in enumerate([(1, 32), (32, 32), (32, 64), (64, 64)], start=1):
            setattr(self, f"conv{i}", nn.Conv2d(cin, cout, 3, 1, 1, bias=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
        self.pool1 = nn.MaxPool2d(2, 2)
        self.pool2 = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(64 * (side // 4) ** 2, 128)
        self.drop1 = nn.Dropout(0.25)
        self.fc2 = nn.Linear(128, classes)
        for m in self.modules():  # as kiln's zoo: Kaiming normal (fan-out) convolutions
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        cbr = lambda i, t: F.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(t)))
        x = self.pool1(cbr(2, cbr(1, x)))
        x = self.pool2(cbr(4, cbr(3, x)))
        x = self.drop1(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


class VggCifar(nn.Module):
    """kiln's zoo::vgg16_bn_cifar: torchvision's vgg16_bn features (32x32 -> 1x1x512), flatten, one
    linear layer named classifier."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = torchvision.models.vgg16_bn(weights=None).features
        self.classifier = nn.Linear(512, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def resnet_cifar(name, classes=10):
    """kiln's zoo::resnet18_cifar / resnet50_cifar: torchvision's ResNet with the CIFAR stem (3x3
    stride-1 convolution, no max pool)."""
    model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
    model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


# kiln's zoo builds GoogLeNet and Inception v3 as torchvision does for fine-tuning: without their
# auxiliary classifiers (aux_logits=False), so the state_dicts and the training-mode outputs match.
TORCHVISION_OPTIONS = {"googlenet": {"aux_logits": False}, "inception_v3": {"aux_logits": False}}


def torchvision_model(name):
    """torchvision's model `name` (weights=None) as kiln's zoo model of that name builds it."""
    return getattr(torchvision.models, name)(weights=None, **TORCHVISION_OPTIONS.get(name, {}))


def randomize_batch_norms(model):
    """Every BatchNorm's running statistics and affine parameters away from their defaults (drawn
    from torch's generator), so that a comparison sees them matter."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
