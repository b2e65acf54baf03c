#pragma once
// What a file given to load_torch_weights (kiln train --init-from) is, in the user's terms: a
// checkpoint kiln train wrote (its model, epochs, input and classes, from its metadata) or a
// PyTorch state_dict (its source, or the architecture its tensor names show). A file that does
// not fit the model is refused saying which it is, rather than only listing tensor names.
#include <string>

#include "kiln/safetensors.h"

namespace kiln {

// A checkpoint written by kiln train (Trainer::save_checkpoint): its metadata 'format' is
// kiln-checkpoint-N. Its tensors carry kiln's own names and layouts.
bool is_kiln_checkpoint(const SafetensorsFile& file);

// The model a kiln checkpoint was trained as (its recipe's 'model'), or "" when it does not say.
std::string kiln_checkpoint_model(const SafetensorsFile& file);

// "a kiln checkpoint of digits_cnn after 3 epochs, trained on 20x20x1 images of 10 classes", with
// what of it the metadata records.
std::string kiln_checkpoint_text(const SafetensorsFile& file);

// "a state_dict of torchvision.models.resnet50(weights=DEFAULT)" (tools/torch_to_safetensors.py
// records its source), else what the names show: "a ResNet state_dict as torchvision names it
// (fc.weight: 1000 classes)", "a VGG state_dict ...", or "a safetensors file of 7 tensors (the
// first: 'w')".
std::string state_dict_text(const SafetensorsFile& file);

}  // namespace kiln
