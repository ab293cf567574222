from vkx.cli import main

main()
