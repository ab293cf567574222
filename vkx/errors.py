"""The root of vkx's typed errors."""


class VkxError(Exception):
    """A problem with the user's input (file, model, option, device).

    The CLI prints the message as one line and exits with code 2; no traceback.
    """
