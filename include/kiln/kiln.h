#pragma once
// Everything a kiln user needs: the model DSL and zoo, the compiler, data, training, threads.
#include "kiln/blueprint.h"
#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/schedule.h"
#include "kiln/threads.h"
#include "kiln/torch_weights.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"
