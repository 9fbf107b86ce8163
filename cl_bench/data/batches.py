"""From uint8 pixels to network inputs, batched on the device: normalisation and augmentation."""
import torch
import torch.nn.functional as F


class View:
    """How a batch of uint8 images becomes a float batch: per-channel normalisation, and for training on
    32×32 colour data a random 4-pixel pad-crop and horizontal flip, and optionally a random brightness factor
    (torchvision's ColorJitter(brightness=b): each image scaled by U[1 - b, 1 + b] in [0, 1], clipped), all as
    batched tensor ops.

    mean and std are one value per channel, or (data.normalization=per_task) one row of them per task, as
    ivclab/CPG normalises each CIFAR-100 superclass task with its own statistics (utils/cifar100_dataset.py:8-10
    and 29-31, values in utils/cifar100_config.py); a per-task view then needs each sample's task id, t."""

    def __init__(self, mean, std, augment: bool, device, channels_last: bool = False, pad: int = 4,
                 brightness: float = 0.0):
        mean, std = torch.tensor(mean, device=device), torch.tensor(std, device=device)
        self.per_task = mean.dim() == 2
        # (x / 255 - mean) / std as one multiply and one add, both in place; per task, row t is task t's
        shape = (-1, mean.shape[-1], 1, 1)
        self.scale, self.shift = (1 / (255 * std)).view(shape), (-mean / std).view(shape)
        self.augment = augment
        self.pad = pad
        self.brightness = brightness
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def eval(self, x: torch.Tensor, t: torch.Tensor | int | None = None) -> torch.Tensor:
        """x: uint8 pixels, or floats on the same 0-255 scale; t: the task id of every sample (a tensor) or of
        the whole batch (an int), read by a per-task view only."""
        scale, shift = self.scale, self.shift
        if self.per_task:
            if t is None:
                raise ValueError("a per-task normalisation (data.normalization=per_task) needs the samples' task ids")
            rows = slice(t, t + 1) if isinstance(t, int) else t
            scale, shift = scale[rows], shift[rows]
        x = x.float().mul_(scale).add_(shift)
        return x.contiguous(memory_format=self.memory_format)

    def train(self, x: torch.Tensor, generator: torch.Generator | None = None,
              t: torch.Tensor | int | None = None) -> torch.Tensor:
        """Augmented on the pixels, then normalised: the crop's padding is black, as torchvision's
        RandomCrop(padding=4) pads the image before ToTensor and Normalize (the references' pipeline)."""
        if self.augment:
            if self.brightness:
                x = random_brightness(x, self.brightness, generator)
            x = random_flip(random_crop(x, self.pad, generator), generator)
        return self.eval(x, t)


def channel_stats(x: torch.Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of uint8 images (N, C, H, W) on the [0, 1] scale, over every
    pixel of every image (the population std), from float64 sums over chunks of images."""
    return chunked_channel_stats(x.split(chunk))


def chunked_channel_stats(parts) -> tuple[list[float], list[float]]:
    """channel_stats over uint8 chunks of images given one at a time (a memory-mapped dataset's)."""
    total = squares = 0.0
    n = 0
    for part in parts:
        part = part.transpose(0, 1).reshape(part.shape[1], -1).double() / 255
        total = total + part.sum(1)
        squares = squares + part.square().sum(1)
        n += part.shape[1]
    mean = total / n
    return mean.tolist(), (squares / n - mean.square()).clamp(min=0).sqrt().tolist()


def random_crop(x: torch.Tensor, pad: int, generator=None) -> torch.Tensor:
    """Pad with 0 (black pixels) by `pad` and cut each image at its own random offset, one gather for the batch."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n, 1), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n, 1), device=x.device, generator=generator)
    rows = (dy + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx + torch.arange(w, device=x.device))[:, None, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chans = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, chans, rows, cols]


def random_flip(x: torch.Tensor, generator=None) -> torch.Tensor:
    flip = torch.rand(x.shape[0], device=x.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(3), x)


def random_brightness(x: torch.Tensor, strength: float, generator=None) -> torch.Tensor:
    """Each image's pixels (0-255) times its own factor drawn from U[max(0, 1 - strength), 1 + strength], clipped
    to 0-255, as torchvision's ColorJitter(brightness=strength) on images in [0, 1]."""
    low = max(0.0, 1 - strength)
    u = torch.rand(x.shape[0], 1, 1, 1, device=x.device, generator=generator)
    return (x.float() * (low + u * (1 + strength - low))).clamp_(0, 255)
